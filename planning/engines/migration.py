"""Generation-migration planner: a pure, deterministic function from inputs to a dated plan.

No Django, no database, no clock: ``plan_migration(PlanInputs) -> MigrationPlan``
gives the same answer for the same inputs, so the console, the API and the
tests all see one truth, and the Django layer only has to translate rows.

The idea, in weekly steps ``w = 0 .. horizon_weeks - 1``:

1. **Facility first.** Every rack position gets a verdict for the target node
   type: ``ok_now`` (cooling kind and kW limits fit today), ``after_upgrade``
   (they fit once its facility upgrade, e.g. a CDU install, is ready:
   ``earliest_start + lead_time_days``) or ``never``. A new rack is only ever
   placed in a position whose verdict allows it *at that week*.
2. **Land when the hall can carry it.** Delivered racks wait (first in, first
   out) until there is an eligible, empty position in a hall whose committed
   power, old fleet included, leaves room for the rack's *full* draw from that
   week to the end of the horizon. Racks in burn-in draw full power and
   deliver nothing; they count as capacity only after burn-in and cut-over.
3. **Drain only what is replaced.** Old racks are drained (eligible positions
   first, so space is freed where new racks can go) only when, with the new
   capacity already in service, the total stays at or above the floor (raw and,
   if given, normalised) and one generation's pool still holds the largest
   job; and at most as many old GPUs are drained as new GPUs are in service or
   delivered and blocked by the old fleet. Because new capacity never leaves
   and later drains are checked when they happen, checking week ``w`` suffices
   for every later week.
4. **Release.** A drained rack stops counting at once, keeps drawing power
   until sanitisation ends, and frees its position after shipping.

Durations are rounded up to whole weeks, so the weekly curve is conservative.
The same engine replays two naive sequences on the same inputs for comparison:
``decommission_first`` (drain everything at the start, land as delivered) and
``one_for_one_swap`` (each delivered rack drains one old rack and lands in its
position once it is shipped and the position can take it). When the plan cannot
land every delivery, retire the old fleet, hold the floor or keep the power
budget within the horizon, ``feasible`` is False and ``fixes`` says, in numbers
computed from the inputs, what would make it work.

Default figures (burn-in days, CDU lead time, PUE, node and rack power, fabric
sizes) are loaded from ``core/reference`` and listed with their sources in
``MigrationPlan.assumptions``.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, timedelta
from decimal import Decimal
from typing import Literal

from core.reference_data import generation as reference_generation
from core.reference_data import parameter

PositionCooling = Literal["air", "rear_door", "liquid"]
CoolingNeed = Literal["air", "liquid", "air-or-liquid"]
VerdictStatus = Literal["ok_now", "after_upgrade", "never"]
PhaseKind = Literal["facility_prep", "land", "burn_in", "cut_over", "drain", "sanitise", "ship"]

PLAN = "plan"
DECOMMISSION_FIRST = "decommission_first"
ONE_FOR_ONE_SWAP = "one_for_one_swap"
_AIR_POSITIONS = frozenset({"air", "rear_door"})
_DAYS_PER_MONTH = Decimal(365) / Decimal(12)
_EPS = 1e-9


@dataclass(frozen=True)
class Assumption:
    """A number the plan used, with where it came from (a reference row or the operator)."""

    name: str
    value: str
    unit: str
    source: str


@dataclass(frozen=True)
class FacilityUpgrade:
    """Work that lets a position take more power/cooling, ready ``lead_time_days`` after it starts."""

    kind: str
    lead_time_days: int
    earliest_start: date
    adds_power_kw: float
    adds_cooling_kw: float
    cooling_after: PositionCooling = "liquid"
    cost: Decimal | None = None
    lead_time_source: str = "operator input"

    @property
    def ready(self) -> date:
        return self.earliest_start + timedelta(days=self.lead_time_days)

    @classmethod
    def cdu_install(
        cls,
        *,
        earliest_start: date,
        adds_power_kw: float,
        adds_cooling_kw: float,
        lead: Literal["low", "high"] = "high",
        cost: Decimal | None = None,
    ) -> FacilityUpgrade:
        """A CDU install whose lead time is the cited ``cdu_lead_time`` range (high end by default)."""
        row = parameter("cdu_lead_time")
        months = row.high if lead == "high" else row.low
        return cls(
            kind="cdu_install",
            lead_time_days=math.ceil(months * _DAYS_PER_MONTH),
            earliest_start=earliest_start,
            adds_power_kw=adds_power_kw,
            adds_cooling_kw=adds_cooling_kw,
            cost=cost,
            lead_time_source=f"{row.value} {row.unit} ({lead} end): {row.source}",
        )


@dataclass(frozen=True)
class Position:
    """One rack position: what it can power and cool today, and the upgrade it may get."""

    id: str
    hall_id: str
    rack: str
    cooling: PositionCooling
    power_kw: float
    cooling_kw: float
    upgrade: FacilityUpgrade | None = None


@dataclass(frozen=True)
class Hall:
    """A hall's IT power budget; ``pue=None`` uses the cited industry average."""

    id: str
    name: str
    it_power_budget_kw: float
    pue: float | None = None


@dataclass(frozen=True)
class NodeTypeSpec:
    """A node type as the planner needs it; ``rack_kw`` is set for rack-scale systems (NVL72)."""

    name: str
    generation: str
    gpu_model: str
    gpus_per_node: int
    node_kw: float | None
    rack_kw: float | None
    cooling: CoolingNeed
    fabric: str
    nodes_per_rack: int
    perf_per_gpu: float = 1.0
    source: str = "operator input"
    perf_source: str = "operator input"

    @property
    def gpus_per_rack(self) -> int:
        return self.gpus_per_node * self.nodes_per_rack

    @property
    def rack_scale(self) -> bool:
        return self.node_kw is None

    def rack_power_kw(self, nodes: int) -> float:
        """Draw of a rack holding ``nodes`` nodes (a rack-scale system scales its rack figure)."""
        if self.node_kw is None:
            assert self.rack_kw is not None
            return self.rack_kw * nodes / self.nodes_per_rack
        return self.node_kw * nodes

    @classmethod
    def from_reference(
        cls,
        gpu_model: str,
        *,
        name: str | None = None,
        nodes_per_rack: int | None = None,
        perf_per_gpu: float = 1.0,
        perf_source: str = "operator input",
    ) -> NodeTypeSpec:
        """Build from generations.csv; nodes per rack is rack kW / node kW, or the NVLink domain for rack-scale."""
        row = reference_generation(gpu_model)
        if nodes_per_rack is None:
            if row.node_kw is None:
                nodes_per_rack = row.nvlink_domain_gpus // row.gpus_per_node
            elif row.rack_kw_typical is not None:
                nodes_per_rack = int((row.rack_kw_typical / row.node_kw).to_integral_value())
            else:
                raise ValueError(f"{gpu_model} has no rack figure in generations.csv: pass nodes_per_rack")
        return cls(
            name=name or gpu_model,
            generation=row.generation,
            gpu_model=row.gpu_model,
            gpus_per_node=row.gpus_per_node,
            node_kw=float(row.node_kw) if row.node_kw is not None else None,
            rack_kw=float(row.rack_kw_typical) if row.rack_kw_typical is not None else None,
            cooling=row.cooling,  # type: ignore[arg-type]
            fabric=row.fabric,
            nodes_per_rack=nodes_per_rack,
            perf_per_gpu=perf_per_gpu,
            source=row.source,
            perf_source=perf_source,
        )


@dataclass(frozen=True)
class FleetBlock:
    """Current nodes of one type, filled ``nodes_per_rack`` at a time into ``position_ids`` in order."""

    id: str
    node_type: NodeTypeSpec
    count: int
    position_ids: tuple[str, ...]


@dataclass(frozen=True)
class Delivery:
    """A shipment of the target node type arriving on ``date``."""

    date: date
    scalable_units: int
    nodes_per_unit: int
    label: str = ""

    @property
    def nodes(self) -> int:
        return self.scalable_units * self.nodes_per_unit


@dataclass(frozen=True)
class PlanInputs:
    """Everything the plan depends on; ``burn_in_days=None`` uses the cited high end of burn_in_per_rack."""

    start: date
    halls: tuple[Hall, ...]
    positions: tuple[Position, ...]
    fleet: tuple[FleetBlock, ...]
    target: NodeTypeSpec
    deliveries: tuple[Delivery, ...]
    capacity_floor_gpus: int
    largest_job_gpus: int
    capacity_floor_perf: float | None = None
    horizon_weeks: int = 104
    burn_in_days: int | None = None
    cut_over_days: int = 1
    drain_days: int = 7
    sanitise_days: int = 7
    ship_days: int = 7
    power_margin: float = 0.05


@dataclass(frozen=True)
class PositionVerdict:
    """Whether the target node type may go into a position, and why, with the numbers."""

    position_id: str
    hall_id: str
    rack: str
    status: VerdictStatus
    ready: date | None
    reason: str


@dataclass(frozen=True)
class Phase:
    """A dated step of the plan over a set of positions."""

    kind: PhaseKind
    start: date
    end: date
    position_ids: tuple[str, ...]
    nodes: int
    gpus: int
    notes: str


@dataclass(frozen=True)
class Placement:
    """Where and when one new rack lands and enters service."""

    rack_id: str
    position_id: str
    hall_id: str
    nodes: int
    land: date
    in_service: date


@dataclass(frozen=True)
class TimelinePoint:
    """The fleet during the week starting ``date`` (dicts are keyed by generation or hall id)."""

    date: date
    total_gpus: int
    gpus_by_generation: dict[str, int]
    largest_pool_gpus: int
    perf_total: float
    perf_by_generation: dict[str, float]
    power_kw_by_hall: dict[str, float]
    power_kw_total: float
    budget_kw_by_hall: dict[str, float]
    budget_kw_total: float
    facility_power_kw: float


@dataclass(frozen=True)
class Timeline:
    """Weekly points from the start date to the end of the horizon."""

    points: tuple[TimelinePoint, ...]

    def min_capacity(self) -> TimelinePoint:
        return min(self.points, key=lambda p: (p.total_gpus, p.date))

    def trough_gpu_days(self, floor_gpus: int) -> int:
        """GPU-days below the floor, each weekly point standing for seven days."""
        return sum(max(0, floor_gpus - p.total_gpus) * 7 for p in self.points)

    def largest_job_runnable_always(self, job_gpus: int) -> bool:
        return all(p.largest_pool_gpus >= job_gpus for p in self.points)

    def within_budget(self) -> bool:
        return all(
            p.power_kw_by_hall[h] <= p.budget_kw_by_hall[h] + _EPS for p in self.points for h in p.power_kw_by_hall
        )


@dataclass(frozen=True)
class Verdicts:
    """The plan's checks; ``naive_trough_gpu_days`` is keyed by naive sequence name."""

    facility_first_ok: bool
    refused_positions: int
    never_exceeds_power_budget: bool
    floor_held: bool
    min_capacity_gpus: int
    min_capacity_date: date
    min_capacity_perf: float
    largest_job_runnable_always: bool
    trough_gpu_days: int
    naive_trough_gpu_days: dict[str, int]


@dataclass(frozen=True)
class NaiveSequence:
    """A naive way to do the same migration, replayed on the same inputs."""

    name: str
    timeline: Timeline
    phases: tuple[Phase, ...]
    trough_gpu_days: int
    min_capacity_gpus: int
    min_capacity_date: date
    largest_job_runnable_always: bool
    stranded_racks: int
    notes: tuple[str, ...]


@dataclass(frozen=True)
class MigrationPlan:
    """The planner's answer; never read ``phases`` as a schedule to follow when ``feasible`` is False."""

    feasible: bool
    fixes: tuple[str, ...]
    verdicts: Verdicts
    position_verdicts: tuple[PositionVerdict, ...]
    phases: tuple[Phase, ...]
    placements: tuple[Placement, ...]
    timeline: Timeline
    naive: tuple[NaiveSequence, ...]
    fabric_notes: tuple[str, ...]
    notes: tuple[str, ...]
    assumptions: tuple[Assumption, ...]
    finish: date | None

    @property
    def headline(self) -> str:
        v = self.verdicts
        if not self.feasible:
            return "INFEASIBLE: " + "; ".join(self.fixes)
        return (
            f"feasible: done by {self.finish}, minimum {v.min_capacity_gpus} GPUs on {v.min_capacity_date}, "
            f"{v.trough_gpu_days} GPU-days below the floor (naive: "
            + ", ".join(f"{k} {n}" for k, n in v.naive_trough_gpu_days.items())
            + ")"
        )


# --------------------------------------------------------------------------- internals


def _kw(x: float) -> str:
    return f"{x:,.1f}".rstrip("0").rstrip(".")


def _weeks(days: int) -> int:
    return max(0, math.ceil(days / 7))


@dataclass
class _OldRack:
    id: str
    block: FleetBlock
    nodes: int
    position: Position
    power_kw: float
    drain_week: int | None = None

    @property
    def gpus(self) -> int:
        return self.nodes * self.block.node_type.gpus_per_node


@dataclass
class _NewRack:
    id: str
    delivery: Delivery
    due_week: int
    nodes: int
    power_kw: float
    position: Position | None = None
    land_week: int | None = None
    swap: _OldRack | None = None
    wait_reason: str = ""


@dataclass
class _Context:
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

    def week_of(self, day: date) -> int:
        return max(0, math.ceil((day - self.inputs.start).days / 7))

    def date_of(self, week: int) -> date:
        return self.inputs.start + timedelta(weeks=week)


def _fits(spec: NodeTypeSpec, cooling: str, power_kw: float, cooling_kw: float, need_kw: float) -> bool:
    kind_ok = spec.cooling == "air-or-liquid" or (
        cooling in _AIR_POSITIONS if spec.cooling == "air" else cooling == "liquid"
    )
    return kind_ok and need_kw <= power_kw + _EPS and need_kw <= cooling_kw + _EPS


def _position_verdict(spec: NodeTypeSpec, pos: Position) -> PositionVerdict:
    need = spec.rack_power_kw(spec.nodes_per_rack)
    needs = f"{spec.name} needs {_kw(need)} kW {spec.cooling}"
    has = f"position {pos.rack} is {pos.cooling}-cooled with {_kw(pos.cooling_kw)} kW cooling, {_kw(pos.power_kw)} kW power"
    if _fits(spec, pos.cooling, pos.power_kw, pos.cooling_kw, need):
        return PositionVerdict(pos.id, pos.hall_id, pos.rack, "ok_now", None, f"ok now: {needs}; {has}")
    up = pos.upgrade
    if up is not None:
        power_after = pos.power_kw + up.adds_power_kw
        cooling_after = pos.cooling_kw + up.adds_cooling_kw
        if _fits(spec, up.cooling_after, power_after, cooling_after, need):
            reason = (
                f"ok after {up.kind} (lead {up.lead_time_days} days: {up.lead_time_source}; "
                f"start {up.earliest_start}, ready {up.ready}): {needs}; after it the position has "
                f"{_kw(cooling_after)} kW {up.cooling_after} cooling, {_kw(power_after)} kW power"
            )
            return PositionVerdict(pos.id, pos.hall_id, pos.rack, "after_upgrade", up.ready, reason)
        return PositionVerdict(
            pos.id,
            pos.hall_id,
            pos.rack,
            "never",
            None,
            f"{needs}; {has}, {_kw(cooling_after)} kW {up.cooling_after} after {up.kind}: refused",
        )
    return PositionVerdict(pos.id, pos.hall_id, pos.rack, "never", None, f"{needs}; {has}: refused")


def _context(inputs: PlanInputs) -> _Context:
    burn_ref = parameter("burn_in_per_rack")
    pue_ref = parameter("pue_industry_average")
    assumptions: list[Assumption] = []
    if inputs.burn_in_days is None:
        assert burn_ref.high is not None
        burn_in_days = int(burn_ref.high)
        assumptions.append(
            Assumption("burn_in_days", str(burn_in_days), "days", f"high end of {burn_ref.value} days: {burn_ref.source}")
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
    seen_specs: dict[str, NodeTypeSpec] = {b.node_type.name: b.node_type for b in inputs.fleet}
    seen_specs[inputs.target.name] = inputs.target
    for spec in seen_specs.values():
        power = _kw(spec.rack_power_kw(spec.nodes_per_rack))
        assumptions.append(Assumption(f"rack_kw[{spec.name}]", power, "kW", spec.source))
        assumptions.append(Assumption(f"perf_per_gpu[{spec.name}]", f"{spec.perf_per_gpu:g}", "relative", spec.perf_source))
    upgrades = {(p.upgrade.kind, p.upgrade.lead_time_days, p.upgrade.lead_time_source) for p in inputs.positions if p.upgrade}
    for kind, days, source in sorted(upgrades):
        assumptions.append(Assumption(f"lead_time[{kind}]", str(days), "days", source))
    start = inputs.start
    verdicts = tuple(_position_verdict(inputs.target, pos) for pos in inputs.positions)
    eligible: dict[str, int | None] = {}
    for v in verdicts:
        if v.status == "ok_now":
            eligible[v.position_id] = 0
        elif v.status == "after_upgrade":
            assert v.ready is not None
            eligible[v.position_id] = max(0, math.ceil((v.ready - start).days / 7))
        else:
            eligible[v.position_id] = None
    return _Context(
        inputs=inputs,
        horizon=inputs.horizon_weeks,
        halls={h.id: h for h in inputs.halls},
        usable_kw={h.id: h.it_power_budget_kw * (1 - inputs.power_margin) for h in inputs.halls},
        pue=pue,
        eligible_week=eligible,
        burn_in_days=burn_in_days,
        service_weeks=_weeks(burn_in_days + inputs.cut_over_days),
        power_release_weeks=_weeks(inputs.drain_days + inputs.sanitise_days),
        space_release_weeks=_weeks(inputs.drain_days + inputs.sanitise_days + inputs.ship_days),
        verdicts=verdicts,
        assumptions=tuple(assumptions),
    )


@dataclass
class _Run:
    old: list[_OldRack]
    new: list[_NewRack]
    power: dict[str, list[float]]


def _old_racks(ctx: _Context) -> list[_OldRack]:
    positions = {p.id: p for p in ctx.inputs.positions}
    racks: list[_OldRack] = []
    for block in ctx.inputs.fleet:
        spec = block.node_type
        if block.count > len(block.position_ids) * spec.nodes_per_rack:
            raise ValueError(f"block {block.id}: {block.count} nodes do not fit {len(block.position_ids)} positions")
        left = block.count
        for pid in block.position_ids:
            nodes = min(left, spec.nodes_per_rack)
            if nodes == 0:
                break
            left -= nodes
            racks.append(_OldRack(f"{block.id}/{pid}", block, nodes, positions[pid], spec.rack_power_kw(nodes)))
    return racks


def _new_racks(ctx: _Context) -> list[_NewRack]:
    spec = ctx.inputs.target
    racks: list[_NewRack] = []
    for i, delivery in enumerate(sorted(ctx.inputs.deliveries, key=lambda d: d.date)):
        left = delivery.nodes
        k = 0
        while left > 0:
            nodes = min(left, spec.nodes_per_rack)
            left -= nodes
            k += 1
            racks.append(
                _NewRack(f"D{i + 1}-{k:03d}", delivery, ctx.week_of(delivery.date), nodes, spec.rack_power_kw(nodes))
            )
    return racks


def _simulate(ctx: _Context, policy: str) -> _Run:
    """Replay ``policy`` week by week; every placement respects eligibility, space and hall power."""
    H = ctx.horizon
    inputs = ctx.inputs
    old = _old_racks(ctx)
    new = _new_racks(ctx)
    power = {h: [0.0] * H for h in ctx.halls}
    free_from: dict[str, int] = {p.id: 0 for p in inputs.positions}
    for rack in old:
        free_from[rack.position.id] = H + 1
        for t in range(H):
            power[rack.position.hall_id][t] += rack.power_kw
    taken: set[str] = set()
    order = {p.id: i for i, p in enumerate(inputs.positions)}
    eligible_positions = [p for p in inputs.positions if ctx.eligible_week[p.id] is not None]
    halls_with_eligible = {p.hall_id for p in eligible_positions}

    def drain(rack: _OldRack, week: int) -> None:
        rack.drain_week = week
        end_power = min(H, week + ctx.power_release_weeks)
        for t in range(end_power, H):
            power[rack.position.hall_id][t] -= rack.power_kw
        free_from[rack.position.id] = week + ctx.space_release_weeks

    def room(hall_id: str, week: int, kw: float) -> bool:
        return max(power[hall_id][week:]) + kw <= ctx.usable_kw[hall_id] + _EPS

    def land(rack: _NewRack, pos: Position, week: int) -> None:
        rack.position, rack.land_week = pos, week
        taken.add(pos.id)
        free_from[pos.id] = H + 1
        for t in range(week, H):
            power[pos.hall_id][t] += rack.power_kw

    def try_land(rack: _NewRack, week: int, candidates: list[Position]) -> bool:
        usable = [p for p in candidates if p.id not in taken and (ctx.eligible_week[p.id] or 0) <= week]
        if not usable:
            rack.wait_reason = "no position able to take it yet (facility)"
            return False
        empty = [p for p in usable if free_from[p.id] <= week]
        if not empty:
            rack.wait_reason = "eligible positions still hold old racks"
            return False
        for pos in sorted(empty, key=lambda p: (free_from[p.id] > 0, order[p.id])):
            if room(pos.hall_id, week, rack.power_kw):
                land(rack, pos, week)
                return True
        rack.wait_reason = "no hall power room"
        return False

    drain_order = sorted(
        old,
        key=lambda r: (
            ctx.eligible_week[r.position.id] is None,
            ctx.eligible_week[r.position.id] or 0,
            r.position.hall_id not in halls_with_eligible,
            order[r.position.id],
        ),
    )
    swap_positions = [r for r in drain_order if ctx.eligible_week[r.position.id] is not None]

    for w in range(H):
        if policy == DECOMMISSION_FIRST and w == 0:
            for rack in old:
                drain(rack, 0)
        if policy == ONE_FOR_ONE_SWAP:
            for rack in new:
                if rack.due_week == w and swap_positions:
                    rack.swap = swap_positions.pop(0)
                    drain(rack.swap, w)
        for rack in new:
            if rack.land_week is None and rack.due_week <= w:
                if policy == ONE_FOR_ONE_SWAP:
                    if rack.swap is not None:
                        try_land(rack, w, [rack.swap.position])
                    else:
                        rack.wait_reason = "no old rack in a position that can take it to swap with"
                else:
                    try_land(rack, w, eligible_positions)
        if policy == PLAN:
            _plan_drains(ctx, w, old, new, drain_order, taken, drain)
    return _Run(old, new, power)


def _plan_drains(
    ctx: _Context,
    w: int,
    old: list[_OldRack],
    new: list[_NewRack],
    drain_order: list[_OldRack],
    taken: set[str],
    drain: Callable[[_OldRack, int], None],
) -> None:
    """Drain old racks at week ``w`` while the floor, the largest job and the replacement budget allow."""
    inputs = ctx.inputs
    target = inputs.target
    gen_gpus: dict[str, int] = defaultdict(int)
    perf = 0.0
    drained_gpus = 0
    for rack in old:
        if rack.drain_week is None:
            gen_gpus[rack.block.node_type.generation] += rack.gpus
            perf += rack.gpus * rack.block.node_type.perf_per_gpu
        else:
            drained_gpus += rack.gpus
    in_service = 0
    blocked = 0
    room_possible = any(
        pid not in taken and week is not None and week <= w for pid, week in ctx.eligible_week.items()
    )
    for rack in new:
        if rack.land_week is not None and rack.land_week + ctx.service_weeks <= w:
            in_service += rack.nodes * target.gpus_per_node
        elif rack.land_week is None and rack.due_week <= w and room_possible:
            blocked += rack.nodes * target.gpus_per_node
    gen_gpus[target.generation] += in_service
    perf += in_service * target.perf_per_gpu
    budget = in_service + blocked - drained_gpus
    for rack in drain_order:
        if budget <= 0:
            break
        if rack.drain_week is not None:
            continue
        gen = rack.block.node_type.generation
        after_total = sum(gen_gpus.values()) - rack.gpus
        after_perf = perf - rack.gpus * rack.block.node_type.perf_per_gpu
        after_pool = max([n - rack.gpus if g == gen else n for g, n in gen_gpus.items()], default=0)
        if after_total < inputs.capacity_floor_gpus or after_pool < inputs.largest_job_gpus:
            continue
        if inputs.capacity_floor_perf is not None and after_perf < inputs.capacity_floor_perf - _EPS:
            continue
        drain(rack, w)
        gen_gpus[gen] -= rack.gpus
        perf = after_perf
        budget -= rack.gpus


def _timeline(ctx: _Context, run: _Run) -> Timeline:
    inputs = ctx.inputs
    target = inputs.target
    budgets = {h.id: h.it_power_budget_kw for h in inputs.halls}
    generations = sorted({b.node_type.generation for b in inputs.fleet} | {target.generation})
    points = []
    for t in range(ctx.horizon):
        gpus = dict.fromkeys(generations, 0)
        perf = dict.fromkeys(generations, 0.0)
        kw = dict.fromkeys(budgets, 0.0)
        for rack in run.old:
            spec = rack.block.node_type
            if rack.drain_week is None or t < rack.drain_week:
                gpus[spec.generation] += rack.gpus
                perf[spec.generation] += rack.gpus * spec.perf_per_gpu
            if rack.drain_week is None or t < rack.drain_week + ctx.power_release_weeks:
                kw[rack.position.hall_id] += rack.power_kw
        for rack in run.new:
            if rack.land_week is None or rack.position is None or t < rack.land_week:
                continue
            kw[rack.position.hall_id] += rack.power_kw
            if t >= rack.land_week + ctx.service_weeks:
                gpus[target.generation] += rack.nodes * target.gpus_per_node
                perf[target.generation] += rack.nodes * target.gpus_per_node * target.perf_per_gpu
        points.append(
            TimelinePoint(
                date=ctx.date_of(t),
                total_gpus=sum(gpus.values()),
                gpus_by_generation=gpus,
                largest_pool_gpus=max(gpus.values()),
                perf_total=round(sum(perf.values()), 6),
                perf_by_generation={g: round(v, 6) for g, v in perf.items()},
                power_kw_by_hall={h: round(v, 6) for h, v in kw.items()},
                power_kw_total=round(sum(kw.values()), 6),
                budget_kw_by_hall=dict(budgets),
                budget_kw_total=sum(budgets.values()),
                facility_power_kw=round(sum(v * ctx.pue[h] for h, v in kw.items()), 6),
            )
        )
    return Timeline(tuple(points))


def _phases(ctx: _Context, run: _Run, with_prep: bool) -> tuple[Phase, ...]:
    inputs = ctx.inputs
    target = inputs.target
    d = timedelta
    groups: dict[tuple[str, date, date, str], list[tuple[str, int, int]]] = defaultdict(list)
    if with_prep:
        used = {r.position.id for r in run.new if r.position is not None}
        for pos in inputs.positions:
            if pos.upgrade is not None and pos.id in used and ctx.eligible_week[pos.id]:
                up = pos.upgrade
                groups[("facility_prep", up.earliest_start, up.ready, up.kind)].append((pos.id, 0, 0))
    for rack in run.new:
        if rack.land_week is None or rack.position is None:
            continue
        land = ctx.date_of(rack.land_week)
        waited = rack.land_week - rack.due_week
        note = f"delivery {rack.delivery.date} {rack.delivery.label}".rstrip()
        if waited:
            note += f"; waited {waited} weeks: {rack.wait_reason}"
        item = (rack.position.id, rack.nodes, rack.nodes * target.gpus_per_node)
        burn_end = land + d(days=ctx.burn_in_days)
        service = ctx.date_of(rack.land_week + ctx.service_weeks)
        groups[("land", land, land, note)].append(item)
        groups[("burn_in", land, burn_end, "draws full power, delivers nothing")].append(item)
        groups[("cut_over", burn_end, service, "in service from the end date")].append(item)
    for rack in run.old:
        if rack.drain_week is None:
            continue
        start = ctx.date_of(rack.drain_week)
        drained = start + d(days=inputs.drain_days)
        sanitised = drained + d(days=inputs.sanitise_days)
        shipped = sanitised + d(days=inputs.ship_days)
        item = (rack.position.id, rack.nodes, rack.gpus)
        groups[("drain", start, drained, f"block {rack.block.id}")].append(item)
        groups[("sanitise", drained, sanitised, "NIST SP 800-88 record per drive; still draws power")].append(item)
        groups[("ship", sanitised, shipped, "frees the position")].append(item)
    rank = {k: i for i, k in enumerate(("facility_prep", "land", "burn_in", "cut_over", "drain", "sanitise", "ship"))}
    phases = [
        Phase(kind, start, end, tuple(i[0] for i in items), sum(i[1] for i in items), sum(i[2] for i in items), note)  # type: ignore[arg-type]
        for (kind, start, end, note), items in groups.items()
    ]
    return tuple(sorted(phases, key=lambda p: (p.start, rank[p.kind], p.end, p.notes)))


def _naive(ctx: _Context, name: str) -> NaiveSequence:
    inputs = ctx.inputs
    run = _simulate(ctx, name)
    timeline = _timeline(ctx, run)
    low = timeline.min_capacity()
    trough = timeline.trough_gpu_days(inputs.capacity_floor_gpus)
    stranded = sum(1 for r in run.new if r.land_week is None)
    notes = [f"capacity falls to {low.total_gpus} GPUs on {low.date}; {trough:,} GPU-days below the floor"]
    if stranded:
        notes.append(f"{stranded} delivered racks never land within the horizon")
    if name == DECOMMISSION_FIRST:
        first_ok = next(
            (p.date for p in timeline.points if p.total_gpus >= inputs.capacity_floor_gpus), None
        )
        if trough and first_ok is not None:
            weeks = (first_ok - inputs.start).days // 7
            notes.append(
                f"delay draining the old fleet by {weeks} weeks (to {first_ok}) to hold the floor of "
                f"{inputs.capacity_floor_gpus} GPUs"
            )
    return NaiveSequence(
        name=name,
        timeline=timeline,
        phases=_phases(ctx, run, with_prep=True),
        trough_gpu_days=trough,
        min_capacity_gpus=low.total_gpus,
        min_capacity_date=low.date,
        largest_job_runnable_always=timeline.largest_job_runnable_always(inputs.largest_job_gpus),
        stranded_racks=stranded,
        notes=tuple(notes),
    )


def _fabric_notes(ctx: _Context, timeline: Timeline) -> tuple[str, ...]:
    inputs = ctx.inputs
    target = inputs.target
    notes: list[str] = []
    limits = {
        "ib-ndr": parameter("ndr_two_tier_fat_tree_max_endpoints"),
        "ib-xdr": parameter("xdr_two_tier_max"),
    }
    for fabric in sorted({b.node_type.fabric for b in inputs.fleet}):
        old_gens = sorted({b.node_type.generation for b in inputs.fleet if b.node_type.fabric == fabric})
        if fabric != target.fabric:
            notes.append(
                f"{target.name} uses {target.fabric}, the {'/'.join(old_gens)} fleet uses {fabric}: "
                f"it needs its own fabric, so the pools are separate"
            )
            continue
        peak = max(
            sum(n for g, n in p.gpus_by_generation.items() if g in old_gens or g == target.generation)
            for p in timeline.points
        )
        limit = limits.get(fabric[:6])
        if limit is not None and limit.high is not None and peak > limit.high:
            notes.append(
                f"{target.name} speaks {fabric} like the {'/'.join(old_gens)} fleet, but {peak:,} endpoints at the "
                f"peak exceed the two-tier limit of {int(limit.high):,} ({limit.source}): it needs its own "
                f"fabric (or a third tier), so the pools are separate"
            )
        else:
            notes.append(
                f"{target.name} can join the existing {fabric} fabric ({peak:,} endpoints at the peak)"
            )
    gens = sorted(timeline.points[0].gpus_by_generation)
    pools = ", ".join(
        f"{g} up to {max(p.gpus_by_generation[g] for p in timeline.points):,} GPUs" for g in gens
    )
    notes.append(f"jobs never span generations; largest pool per generation: {pools}")
    if target.rack_scale:
        notes.append(f"{target.name}: NVLink domain of {target.gpus_per_rack} GPUs per rack")
    return tuple(notes)


def _fixes(ctx: _Context, run: _Run, timeline: Timeline) -> list[str]:
    """Concrete changes to the inputs, with numbers, that would remove each reason for infeasibility."""
    inputs = ctx.inputs
    target = inputs.target
    H = ctx.horizon
    fixes: list[str] = []
    first = timeline.points[0]
    for hall in inputs.halls:
        initial = sum(r.power_kw for r in run.old if r.position.hall_id == hall.id)
        if initial > ctx.usable_kw[hall.id] + _EPS:
            raise_by = math.ceil(initial / (1 - inputs.power_margin) - hall.it_power_budget_kw)
            fixes.append(
                f"raise hall {hall.id} budget by {raise_by} kW: the current fleet draws {_kw(initial)} kW "
                f"against {_kw(ctx.usable_kw[hall.id])} kW usable"
            )
    if first.total_gpus < inputs.capacity_floor_gpus:
        fixes.append(
            f"lower the capacity floor to {first.total_gpus} GPUs: the fleet has only {first.total_gpus} at the start"
        )
    if first.largest_pool_gpus < inputs.largest_job_gpus:
        fixes.append(
            f"lower the largest job to {first.largest_pool_gpus} GPUs: no generation pool holds "
            f"{inputs.largest_job_gpus} at the start"
        )
    unlanded = [r for r in run.new if r.land_week is None]
    late = [r for r in run.new if r.land_week is not None and r.land_week + ctx.service_weeks >= H]
    spec_need = f"{_kw(target.rack_power_kw(target.nodes_per_rack))} kW {target.cooling}"
    if unlanded:
        eligible = [p for p in inputs.positions if ctx.eligible_week[p.id] is not None]
        in_horizon = [p for p in eligible if (ctx.eligible_week[p.id] or 0) < H]
        short = len(run.new) - len(in_horizon)
        if short > 0:
            fixes.append(f"add {short} positions that can take {target.name} ({spec_need})")
        due = min(r.due_week for r in unlanded)
        late_upgrades: dict[tuple[str, date, int], list[str]] = defaultdict(list)
        for pos in eligible:
            week = ctx.eligible_week[pos.id] or 0
            if week >= H - ctx.service_weeks and pos.upgrade is not None:
                late_upgrades[(pos.upgrade.kind, pos.upgrade.ready, week)].append(pos.rack)
        for (kind, ready, week), racks in sorted(late_upgrades.items()):
            earlier = week - max(0, min(due, H - 1 - ctx.service_weeks))
            fixes.append(
                f"start the {kind} for {len(racks)} positions ({racks[0]}..{racks[-1]}) {earlier} weeks earlier "
                f"(ready {ready} is too late for the horizon ending {ctx.date_of(H)})"
            )
        free_by_hall: dict[str, int] = defaultdict(int)
        for pos in in_horizon:
            if pos.id not in {r.position.id for r in run.new if r.position is not None}:
                free_by_hall[pos.hall_id] += 1
        left = len(unlanded)
        for hall_id, free in sorted(free_by_hall.items(), key=lambda kv: (-kv[1], kv[0])):
            if left <= 0:
                break
            n = min(left, free)
            left -= n
            peak = max(run.power[hall_id][due:] or [0.0])
            need = peak + n * unlanded[0].power_kw - ctx.usable_kw[hall_id]
            if need > _EPS:
                fixes.append(
                    f"raise hall {hall_id} budget by {math.ceil(need / (1 - inputs.power_margin))} kW "
                    f"so {n} more {target.name} racks fit"
                )
        if not fixes:
            fixes.append(
                f"{len(unlanded)} {target.name} racks cannot land: the old racks in their positions cannot be "
                f"drained without breaking the floor; lower the floor or add positions for {target.name}"
            )
    if late:
        fixes.append(
            f"deliver {len(late)} racks earlier or extend the horizon beyond {H} weeks: they would not be in "
            f"service before {ctx.date_of(H)}"
        )
    remaining = [r for r in run.old if r.drain_week is None]
    if remaining and not unlanded:
        new_gpus = sum(r.nodes for r in run.new) * target.gpus_per_node
        old_left = sum(r.gpus for r in remaining)
        if new_gpus < inputs.capacity_floor_gpus:
            fixes.append(
                f"deliver {inputs.capacity_floor_gpus - new_gpus} more {target.name} GPUs (or lower the floor to "
                f"{new_gpus}): the new fleet of {new_gpus} GPUs cannot hold the floor of "
                f"{inputs.capacity_floor_gpus} alone, so {old_left} old GPUs cannot be retired"
            )
        elif new_gpus < inputs.largest_job_gpus:
            fixes.append(
                f"deliver {inputs.largest_job_gpus - new_gpus} more {target.name} GPUs: the largest job of "
                f"{inputs.largest_job_gpus} needs one pool of that size"
            )
        else:
            fixes.append(
                f"extend the horizon beyond {H} weeks or deliver earlier: {len(remaining)} old racks "
                f"({old_left} GPUs) are still in service at {ctx.date_of(H)}"
            )
    return fixes


def plan_migration(inputs: PlanInputs) -> MigrationPlan:
    """Plan moving ``inputs.fleet`` onto ``inputs.target``; pure and deterministic."""
    ctx = _context(inputs)
    run = _simulate(ctx, PLAN)
    timeline = _timeline(ctx, run)
    naive = (_naive(ctx, DECOMMISSION_FIRST), _naive(ctx, ONE_FOR_ONE_SWAP))
    fixes = _fixes(ctx, run, timeline)
    phases = _phases(ctx, run, with_prep=True)
    low = timeline.min_capacity()
    floor_held = all(p.total_gpus >= inputs.capacity_floor_gpus for p in timeline.points) and (
        inputs.capacity_floor_perf is None
        or all(p.perf_total >= inputs.capacity_floor_perf - _EPS for p in timeline.points)
    )
    verdicts = Verdicts(
        facility_first_ok=all(
            ctx.eligible_week[r.position.id] is not None and (ctx.eligible_week[r.position.id] or 0) <= (r.land_week or 0)
            for r in run.new
            if r.position is not None
        ),
        refused_positions=sum(1 for v in ctx.verdicts if v.status == "never"),
        never_exceeds_power_budget=timeline.within_budget(),
        floor_held=floor_held,
        min_capacity_gpus=low.total_gpus,
        min_capacity_date=low.date,
        min_capacity_perf=min(p.perf_total for p in timeline.points),
        largest_job_runnable_always=timeline.largest_job_runnable_always(inputs.largest_job_gpus),
        trough_gpu_days=timeline.trough_gpu_days(inputs.capacity_floor_gpus),
        naive_trough_gpu_days={n.name: n.trough_gpu_days for n in naive},
    )
    feasible = not fixes and verdicts.never_exceeds_power_budget and floor_held and verdicts.largest_job_runnable_always
    notes = []
    for rack in run.new:
        if rack.land_week is not None and rack.land_week > rack.due_week:
            notes.append(
                f"rack {rack.id} (delivery {rack.delivery.date}) waited {rack.land_week - rack.due_week} weeks: "
                f"{rack.wait_reason}"
            )
    placements = tuple(
        Placement(
            r.id,
            r.position.id,
            r.position.hall_id,
            r.nodes,
            ctx.date_of(r.land_week),
            ctx.date_of(r.land_week + ctx.service_weeks),
        )
        for r in run.new
        if r.position is not None and r.land_week is not None
    )
    return MigrationPlan(
        feasible=feasible,
        fixes=tuple(fixes),
        verdicts=verdicts,
        position_verdicts=ctx.verdicts,
        phases=phases,
        placements=placements,
        timeline=timeline,
        naive=naive,
        fabric_notes=_fabric_notes(ctx, timeline),
        notes=tuple(notes),
        assumptions=ctx.assumptions,
        finish=max((p.end for p in phases), default=None) if feasible else None,
    )


def demo_inputs(*, start: date = date(2026, 7, 6), hall2_budget_kw: float = 2400.0) -> PlanInputs:
    """The demo fleet: 256 H100 nodes (2,048 GPUs) on air in hall 1, moving to GB200-NVL72.

    Hall 1 has 128 air positions of 20.4 kW holding two H100 nodes each; its last 16
    positions can get a CDU (cited lead time, high end) that makes them 140 kW liquid.
    Hall 2 has 16 liquid positions of 140 kW. Four 8-rack scalable units arrive in
    weeks 4, 12, 40 and 56; the floor is 1,536 GPUs and a 1,024-GPU job must always fit.
    """
    h100 = NodeTypeSpec.from_reference("H100-SXM5-80GB", name="h100-sxm-8x")
    gb200 = NodeTypeSpec.from_reference(
        "GB200-NVL72",
        name="GB200-NVL72",
        perf_per_gpu=2.0,
        perf_source="demo assumption (operator input; no reference figure)",
    )
    cdu = FacilityUpgrade.cdu_install(earliest_start=start, adds_power_kw=119.6, adds_cooling_kw=119.6)
    hall1 = [
        Position(f"H1-R{i:03d}", "H1", f"H1-R{i:03d}", "air", 20.4, 20.4, cdu if i > 112 else None)
        for i in range(1, 129)
    ]
    hall2 = [Position(f"H2-R{i:03d}", "H2", f"H2-R{i:03d}", "liquid", 140.0, 140.0) for i in range(1, 17)]
    su_nodes = 8 * gb200.nodes_per_rack
    return PlanInputs(
        start=start,
        halls=(Hall("H1", "hall 1", 2800.0), Hall("H2", "hall 2", hall2_budget_kw)),
        positions=tuple(hall1 + hall2),
        fleet=(FleetBlock("h100-hall1", h100, 256, tuple(p.id for p in hall1)),),
        target=gb200,
        deliveries=tuple(
            Delivery(start + timedelta(weeks=w), 1, su_nodes, f"SU{i + 1}") for i, w in enumerate((4, 12, 40, 56))
        ),
        capacity_floor_gpus=1536,
        largest_job_gpus=1024,
    )
