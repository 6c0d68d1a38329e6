"""The resolved, policy-independent facts a plan and its naive replays share: durations in
weeks, usable hall power, eligibility of each position, and every assumption with its source."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from datetime import date, timedelta

from core.reference_data import burn_in_deadline, parameter
from planning.engines.migration.facility import FacilityFigures, kw_text, position_verdict
from planning.engines.migration.inputs import Assumption, Delivery, FleetBlock, Hall, NodeTypeSpec, PlanInputs, Position
from planning.engines.migration.results import PositionVerdict


def whole_weeks(days: int) -> int:
    return max(0, math.ceil(days / 7))


@dataclass
class OldRack:
    id: str
    block: FleetBlock
    nodes: int
    position: Position
    power_kw: float
    drain_week: int | None = None
    gpus: int = 0
    perf: float = 0.0

    def __post_init__(self) -> None:
        self.gpus = self.nodes * self.block.node_type.gpus_per_node
        self.perf = self.gpus * self.block.node_type.perf_per_gpu


@dataclass
class NewRack:
    id: str
    delivery: Delivery
    due_week: int
    nodes: int
    power_kw: float
    position: Position | None = None
    land_week: int | None = None
    swap: OldRack | None = None
    wait_reason: str = ""


@dataclass
class PlanContext:
    """Resolved, policy-independent facts shared by the plan and the naive replays."""

    inputs: PlanInputs
    horizon: int
    halls: dict[str, Hall]
    usable_kw: dict[str, float]
    pue: dict[str, float]
    eligible_week: dict[str, int | None]
    burn_in_days: int
    service_weeks: int
    power_release_weeks: int
    space_release_weeks: int
    verdicts: tuple[PositionVerdict, ...]
    assumptions: tuple[Assumption, ...]
    facility: FacilityFigures
    floor_gpus: int
    floor_perf: float | None
    perf_unit: str

    def week_of(self, day: date) -> int:
        return max(0, math.ceil((day - self.inputs.start).days / 7))

    def date_of(self, week: int) -> date:
        return self.inputs.start + timedelta(weeks=week)


def build_context(inputs: PlanInputs) -> PlanContext:
    pue_ref = parameter("pue_industry_average")
    assumptions: list[Assumption] = []
    if inputs.burn_in_days is None:
        deadline = burn_in_deadline()
        burn_in_days = max(1, math.ceil(deadline / timedelta(days=1)))
        row = parameter("burn_in_deadline")
        assumptions.append(
            Assumption(
                "burn_in_days",
                str(burn_in_days),
                "days",
                f"burn_in_deadline {row.value} {row.unit}, the lifecycle's burn-in deadline too: {row.source}",
            )
        )
    else:
        burn_in_days = inputs.burn_in_days
        assumptions.append(Assumption("burn_in_days", str(burn_in_days), "days", "operator input"))
    pue: dict[str, float] = {}
    for hall in inputs.halls:
        if hall.pue is None:
            assert pue_ref.low is not None
            pue[hall.id] = float(pue_ref.low)
            assumptions.append(Assumption(f"pue[{hall.id}]", pue_ref.value, pue_ref.unit, pue_ref.source))
        else:
            pue[hall.id] = hall.pue
    for name, value in (
        ("cut_over_days", inputs.cut_over_days),
        ("drain_days", inputs.drain_days),
        ("sanitise_days", inputs.sanitise_days),
        ("ship_days", inputs.ship_days),
    ):
        assumptions.append(Assumption(name, str(value), "days", "operator input"))
    assumptions.append(Assumption("power_margin", f"{inputs.power_margin:.0%}", "of hall IT budget", "operator policy"))
    fac = FacilityFigures.load()
    assumptions.append(Assumption("air_rack_limit", kw_text(fac.air_limit_kw), "kW", fac.air_limit_source))
    assumptions.append(
        Assumption(
            "residual_air_fraction", f"{fac.residual_air_fraction:g}", "of a liquid rack's heat", fac.residual_source
        )
    )
    cdu = parameter("cdu_redundancy")
    assumptions.append(Assumption("cdu_redundancy", cdu.value, cdu.unit, cdu.source))
    assumptions.append(Assumption("rack_footprint", f"{fac.footprint_m2:g}", "m2", fac.footprint_source))
    seen_specs: dict[str, NodeTypeSpec] = {b.node_type.name: b.node_type for b in (*inputs.fleet, *inputs.kept)}
    seen_specs[inputs.target.name] = inputs.target
    for spec in seen_specs.values():
        power = kw_text(spec.rack_power_kw(spec.nodes_per_rack))
        assumptions.append(Assumption(f"rack_kw[{spec.name}]", power, "kW", spec.source))
        assumptions.append(
            Assumption(
                f"perf_per_gpu[{spec.name}]",
                f"{spec.perf_per_gpu:g}",
                f"H100-equivalent ({inputs.workload})",
                spec.perf_source,
            )
        )
        if spec.rack_weight_kg is not None:
            assumptions.append(
                Assumption(f"rack_weight[{spec.name}]", kw_text(spec.rack_weight_kg), "kg", spec.weight_source)
            )
    upgrades = {
        (p.upgrade.kind, p.upgrade.lead_time_days, p.upgrade.lead_time_source) for p in inputs.positions if p.upgrade
    }
    for kind, days, source in sorted(upgrades):
        assumptions.append(Assumption(f"lead_time[{kind}]", str(days), "days", source))
    start = inputs.start
    halls = {h.id: h for h in inputs.halls}
    # Positions alike in everything but their name get the same verdict: compute it once.
    memo: dict[tuple, PositionVerdict] = {}
    verdict_list = []
    for pos in inputs.positions:
        key = (pos.hall_id, pos.cooling, pos.power_kw, pos.cooling_kw, pos.upgrade)
        seen = memo.get(key)
        if seen is None:
            seen = memo[key] = position_verdict(inputs.target, pos, halls.get(pos.hall_id), fac)
            verdict_list.append(seen)
        else:
            verdict_list.append(
                dataclasses.replace(
                    seen,
                    position_id=pos.id,
                    rack=pos.rack,
                    reason=seen.reason.replace(f"position {seen.rack} is", f"position {pos.rack} is", 1),
                )
            )
    verdicts = tuple(verdict_list)
    eligible: dict[str, int | None] = {}
    for v in verdicts:
        if v.status == "ok_now":
            eligible[v.position_id] = 0
        elif v.status == "after_upgrade":
            assert v.ready is not None
            eligible[v.position_id] = max(0, math.ceil((v.ready - start).days / 7))
        else:
            eligible[v.position_id] = None
    floor_perf = inputs.capacity_floor_perf if inputs.capacity_floor_perf else None
    return PlanContext(
        inputs=inputs,
        horizon=inputs.horizon_weeks,
        halls=halls,
        usable_kw={h.id: h.it_power_budget_kw * (1 - inputs.power_margin) for h in inputs.halls},
        pue=pue,
        eligible_week=eligible,
        burn_in_days=burn_in_days,
        service_weeks=whole_weeks(burn_in_days + inputs.cut_over_days),
        power_release_weeks=whole_weeks(inputs.drain_days + inputs.sanitise_days),
        space_release_weeks=whole_weeks(inputs.drain_days + inputs.sanitise_days + inputs.ship_days),
        verdicts=verdicts,
        assumptions=tuple(assumptions),
        facility=fac,
        floor_gpus=max(0, inputs.capacity_floor_gpus),
        floor_perf=floor_perf,
        perf_unit=f"H100-equivalent ({inputs.workload})",
    )
