"""Canonical JSON of the migration planner's inputs and answer: what a stored plan keeps, and
the way back, so a stored plan recomputes (and is charted) without reading the inventory again."""

from __future__ import annotations

import math
from dataclasses import asdict
from datetime import date
from decimal import Decimal

from planning.engines.migration import inputs as planner_inputs
from planning.engines.migration.results import MigrationPlanResult, Phase, Placement


def _plain(value):
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, float) and math.isfinite(value):
        return round(value, 6)
    return value


def inputs_to_json(inputs: planner_inputs.PlanInputs) -> dict:
    return _plain(asdict(inputs))


def _upgrade(d: dict | None) -> planner_inputs.FacilityUpgrade | None:
    if d is None:
        return None
    return planner_inputs.FacilityUpgrade(
        **{
            **d,
            "earliest_start": date.fromisoformat(d["earliest_start"]),
            "cost": Decimal(d["cost"]) if d["cost"] is not None else None,
        }
    )


def _block(b: dict) -> planner_inputs.FleetBlock:
    return planner_inputs.FleetBlock(
        **{**b, "node_type": planner_inputs.NodeTypeSpec(**b["node_type"]), "position_ids": tuple(b["position_ids"])}
    )


def inputs_from_json(d: dict) -> planner_inputs.PlanInputs:
    """Inverse of ``inputs_to_json``: stored plans recompute without reading the inventory."""
    return planner_inputs.PlanInputs(
        **{
            **d,
            "start": date.fromisoformat(d["start"]),
            "halls": tuple(planner_inputs.Hall(**h) for h in d["halls"]),
            "positions": tuple(
                planner_inputs.Position(**{**p, "upgrade": _upgrade(p["upgrade"])}) for p in d["positions"]
            ),
            "fleet": tuple(_block(b) for b in d["fleet"]),
            "kept": tuple(_block(b) for b in d.get("kept", ())),
            "target": planner_inputs.NodeTypeSpec(**d["target"]),
            "deliveries": tuple(
                planner_inputs.Delivery(**{**x, "date": date.fromisoformat(x["date"])}) for x in d["deliveries"]
            ),
            "floor_steps": tuple(
                planner_inputs.FloorStep(date.fromisoformat(x["start"]), x["perf"]) for x in d.get("floor_steps", ())
            ),
        }
    )


def plan_to_json(plan: MigrationPlanResult) -> dict:
    """The stored result: everything the planner said, plus its headline."""
    return {**_plain(asdict(plan)), "headline": plan.headline}


def schedule_from_json(result: dict) -> tuple[tuple[Phase, ...], tuple[Placement, ...], tuple[date, ...]]:
    """A stored result's phases, placements and timeline weeks, as the planner made them."""
    phases = tuple(
        Phase(
            **{
                **ph,
                "start": date.fromisoformat(ph["start"]),
                "end": date.fromisoformat(ph["end"]),
                "position_ids": tuple(ph["position_ids"]),
            }
        )
        for ph in result["phases"]
    )
    placements = tuple(
        Placement(**{**pl, "land": date.fromisoformat(pl["land"]), "in_service": date.fromisoformat(pl["in_service"])})
        for pl in result["placements"]
    )
    weeks = tuple(date.fromisoformat(p["date"]) for p in result["timeline"]["points"])
    return phases, placements, weeks
