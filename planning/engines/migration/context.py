"""The resolved, policy-independent facts a plan and its naive replays share: durations in
weeks, usable hall power, eligibility of each position, and every assumption with its source."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from datetime import date, timedelta
from itertools import accumulate

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
    # Why it drained (what the drain frees and for whom) and the week what it frees is first used.
    drain_reason: str = ""
    used_week: int | None = None
    resource: str = ""

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
    # Weeks waited per reason, for the plan's binding constraints.
    waits: dict[str, int] = dataclasses.field(default_factory=dict)


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
    # The normalised floor week by week (None: no such floor) and, from each week on, its highest
    # value: a drain must leave every later week's floor standing too.
    floor_weeks: list[float] | None
    floor_from: list[float] | None
    job_perf: float
    # Hall cooling: liquid (CDU) and room-air capacity (None: not checked), and liquid capacity that
    # facility upgrades add from their ready week; each with where it came from.
    liquid_cap: dict[str, float | None]
    liquid_added: dict[str, list[tuple[int, float]]]
    air_cap: dict[str, float | None]
    liquid_pue: dict[str, float]
    fabric_limit: int | None
    fabric_source: str

    @property
    def stepped_floor(self) -> bool:
        return bool(self.inputs.floor_steps)

    def floor_at(self, week: int) -> float | None:
        if self.floor_weeks is None:
            return None
        return self.floor_weeks[min(max(0, week), len(self.floor_weeks) - 1)]

    def week_of(self, day: date) -> int:
        return max(0, math.ceil((day - self.inputs.start).days / 7))

    def date_of(self, week: int) -> date:
        if 0 <= week < len(self._dates):
            return self._dates[week]
        return self.inputs.start + timedelta(weeks=week)

    @property
    def _dates(self) -> list[date]:
        cached = self.__dict__.get("_date_cache")
        if cached is None:
            cached = [self.inputs.start + timedelta(weeks=w) for w in range(self.horizon + 8)]
            self.__dict__["_date_cache"] = cached
        return cached


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
    floor_weeks = floor_by_week(inputs)
    floor_from = list(accumulate(reversed(floor_weeks), max))[::-1] if floor_weeks else None
    floor_perf = max(floor_weeks) if floor_weeks else None
    liquid_cap, liquid_added, air_cap, cooling_notes = hall_cooling(inputs, halls, fac, start)
    assumptions.extend(cooling_notes)
    liquid_pue, pue_note = liquid_pues(inputs, pue)
    assumptions.append(pue_note)
    fabric_limit, fabric_source = fabric_size(inputs)
    assumptions.append(
        Assumption("fabric_max_endpoints", f"{fabric_limit:,}" if fabric_limit else "none", "GPUs", fabric_source)
    )
    job_perf = inputs.largest_job_perf if inputs.largest_job_perf is not None else float(inputs.largest_job_gpus)
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
        perf_unit=inputs.perf_unit or f"H100-equivalent ({inputs.workload})",
        floor_weeks=floor_weeks,
        floor_from=floor_from,
        job_perf=max(0.0, job_perf),
        liquid_cap=liquid_cap,
        liquid_added=liquid_added,
        air_cap=air_cap,
        liquid_pue=liquid_pue,
        fabric_limit=fabric_limit,
        fabric_source=fabric_source,
    )


def floor_by_week(inputs: PlanInputs) -> list[float] | None:
    """The normalised floor in force during each week: a forecast's steps (a week takes the highest
    value in force on any of its days; before the first step, the first step's value), else the
    constant floor, else None."""
    H = inputs.horizon_weeks
    if inputs.floor_steps:
        steps = sorted(inputs.floor_steps, key=lambda s: s.start)
        weeks = []
        for t in range(H):
            end = inputs.start + timedelta(weeks=t + 1)
            in_force = [s.perf for s in steps if s.start < end]
            weeks.append(in_force[-1] if in_force else steps[0].perf)
            # A step that starts inside the week raises that whole week.
        return weeks
    if inputs.capacity_floor_perf:
        return [float(inputs.capacity_floor_perf)] * H
    return None


def hall_cooling(
    inputs: PlanInputs, halls: dict[str, Hall], fac: FacilityFigures, start: date
) -> tuple[dict, dict, dict, list[Assumption]]:
    """Each hall's liquid (CDU) and room-air capacity: the operator's figures where given, else the
    split of its positions' cooling. An air or rear-door position's cooling is room air; a liquid
    position's cooling is (1 - f) liquid and f room air for its rack's residual heat (f: the high end
    of liquid_rack_residual_air_fraction). An upgrade that makes a position liquid adds its (1 - f)
    share of liquid capacity from its ready week; the room's air handlers stay as they were."""
    f = fac.residual_air_fraction
    liquid_cap: dict[str, float | None] = {}
    liquid_added: dict[str, list[tuple[int, float]]] = {h: [] for h in halls}
    air_cap: dict[str, float | None] = {}
    notes: list[Assumption] = []
    base_liquid: dict[str, float] = dict.fromkeys(halls, 0.0)
    base_air: dict[str, float] = dict.fromkeys(halls, 0.0)
    for pos in inputs.positions:
        if pos.hall_id not in halls:
            continue
        if pos.cooling == "liquid":
            base_liquid[pos.hall_id] += (1 - f) * pos.cooling_kw
            base_air[pos.hall_id] += f * pos.cooling_kw
        else:
            base_air[pos.hall_id] += pos.cooling_kw
            up = pos.upgrade
            if up is not None and up.cooling_after == "liquid":
                week = max(0, math.ceil((up.ready - start).days / 7))
                liquid_added[pos.hall_id].append((week, (1 - f) * (pos.cooling_kw + up.adds_cooling_kw)))
    for hall_id, hall in halls.items():
        if hall.cdu_usable_kw is not None:
            liquid_cap[hall_id] = hall.cdu_usable_kw
            liquid_added[hall_id] = []
        else:
            liquid_cap[hall_id] = base_liquid[hall_id]
            added = sum(kw for _, kw in liquid_added[hall_id])
            notes.append(
                Assumption(
                    f"cdu_kw[{hall_id}]",
                    kw_text(base_liquid[hall_id]) + (f" (+{kw_text(added)} after upgrades)" if added else ""),
                    "kW liquid",
                    f"not given: {1 - f:g} of its liquid positions' cooling kW ({fac.residual_source})",
                )
            )
        if hall.air_cooling_kw is not None:
            air_cap[hall_id] = hall.air_cooling_kw
        else:
            air_cap[hall_id] = base_air[hall_id]
            notes.append(
                Assumption(
                    f"room_air_kw[{hall_id}]",
                    kw_text(base_air[hall_id]),
                    "kW room air",
                    f"not given: its air and rear-door positions' cooling kW, plus {f:g} of its liquid positions' "
                    "for their racks' residual heat",
                )
            )
    return liquid_cap, liquid_added, air_cap, notes


def liquid_pues(inputs: PlanInputs, pue: dict[str, float]) -> tuple[dict[str, float], Assumption]:
    """PUE applied to liquid heat: the high end of pue_new_build (liquid-cooled builds), never above
    the hall's own; air heat keeps the hall's PUE."""
    row = parameter("pue_new_build")
    assert row.high is not None
    liquid = float(row.high)
    return (
        {h: min(p, liquid) for h, p in pue.items()},
        Assumption(
            "pue_liquid", f"{liquid:g}", "ratio (liquid heat)", f"high end of pue_new_build {row.value}: {row.source}"
        ),
    )


FABRIC_LIMITS = {"ib-ndr": "ndr_two_tier_fat_tree_max_endpoints", "ib-xdr": "xdr_two_tier_max"}


def fabric_size(inputs: PlanInputs) -> tuple[int | None, str]:
    """Endpoints the fabric the target would join can take: the operator's figure, else the two-tier
    limit of its technology (facility.csv)."""
    if inputs.fabric_max_endpoints is not None:
        return inputs.fabric_max_endpoints, "operator input"
    name = FABRIC_LIMITS.get(inputs.target.fabric[:6])
    if name is None:
        return None, f"no two-tier limit known for {inputs.target.fabric}"
    row = parameter(name)
    assert row.high is not None
    return int(row.high), f"{name}: {row.source}"
