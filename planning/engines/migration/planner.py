"""Generation-migration planner: a pure, deterministic function from inputs to a dated plan.

No Django, no database, no clock: ``plan_migration(PlanInputs) -> MigrationPlanResult``
gives the same answer for the same inputs, so the console, the API and the
tests all see one truth, and the Django layer only has to translate rows.

Capacity is counted in two units at once: raw GPUs, and H100-equivalents
(GPUs x ``perf_per_gpu``, the generation's ratio to an H100 SXM5 for the workload
class the operator plans for, from ``generations.csv`` unless overridden). The
operator gives a floor in either unit or both; the plan keeps every week at or
above each floor it was given.

The idea, in weekly steps ``w = 0 .. horizon_weeks - 1``:

1. **Facility first.** Every rack position gets a verdict for the target node
   type: ``ok_now`` (cooling kind, kW, the air-rack limit, a liquid rack's residual
   air heat and the hall's floor loading fit today), ``after_upgrade`` (they fit
   once its facility upgrade, e.g. a CDU install, is ready) or ``never``; the
   reason names every check with its numbers. A new rack is only placed in a
   position whose verdict allows it *at that week*.
2. **Land when the hall can carry it.** Delivered racks wait (first in, first
   out) until an eligible, empty position is in a hall whose committed power,
   shared CDU capacity (all units but one: N+1) and room-air cooling, old fleet and
   racks already of the target generation included, leave room for the rack from
   that week to the end of the horizon. Racks in burn-in draw full power and
   deliver nothing; they count as capacity only after burn-in and cut-over.
3. **Drain as the floors allow.** Old racks are drained (eligible positions
   first, so space is freed where new racks can go) whenever, with the new
   capacity already in service, every floor the operator gave still holds and one
   generation's pool still holds the largest job. The default floor is today's
   capacity, so by default an old rack leaves only when new capacity has replaced
   it, in the floor's unit: fewer, faster GPUs retire more, slower ones. Because
   new capacity never leaves and later drains are checked when they happen,
   checking week ``w`` suffices for every later week.
4. **Release.** A drained rack stops counting at once, keeps drawing power
   until sanitisation ends, and frees its position after shipping.

Durations are rounded up to whole weeks, so the weekly curve is conservative.
The same engine replays two naive sequences on the same inputs for comparison:
``decommission_first`` (drain everything at the start, land as delivered) and
``one_for_one_swap`` (each delivered rack drains one old rack and lands in its
position once it is shipped and the position can take it); their troughs are
measured against the same floors. When the plan cannot land every delivery,
retire the old fleet, hold the floors or keep the power budget within the
horizon, ``feasible`` is False and ``fixes`` says, in numbers computed from the
inputs and in the floor's unit, what would make it work.

Work is linear in racks: each week touches only the racks whose state changes,
positions wait in per-hall heaps, and the timeline is built from difference arrays.

Default figures (burn-in, CDU lead time and redundancy, PUE, node and rack power
and weight, residual air heat, floor loading, performance ratios) are loaded from
``core/reference`` and listed with their sources in ``MigrationPlanResult.assumptions``.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import date, timedelta
from decimal import Decimal
from itertools import accumulate
from typing import Literal

from core.reference_data import burn_in_deadline, parameter
from core.reference_data import generation as reference_generation

PositionCooling = Literal["air", "rear_door", "liquid"]
CoolingNeed = Literal["air", "liquid", "air-or-liquid"]
VerdictStatus = Literal["ok_now", "after_upgrade", "never"]
PhaseKind = Literal["facility_prep", "land", "burn_in", "cut_over", "drain", "sanitise", "ship"]
Workload = Literal["training", "inference"]

PLAN = "plan"
DECOMMISSION_FIRST = "decommission_first"
ONE_FOR_ONE_SWAP = "one_for_one_swap"
WORKLOADS: tuple[Workload, ...] = ("training", "inference")
_AIR_POSITIONS = frozenset({"air", "rear_door"})
_DAYS_PER_MONTH = Decimal(365) / Decimal(12)
_EPS = 1e-9
_G = 9.80665  # m/s^2: kg on the floor -> N


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
    """A hall's IT power budget and shared facility limits; ``None`` means not known (not checked).

    ``pue=None`` uses the cited industry average. ``cdu_units`` x ``cdu_unit_kw`` is the liquid
    heat the hall's coolant distribution can take; the plan counts all units but one (N+1).
    ``air_cooling_kw`` is the room-air heat the hall's air handlers remove (air racks plus the
    residual air heat of liquid racks). ``floor_load_kpa`` is the floor's rated distributed load.
    """

    id: str
    name: str
    it_power_budget_kw: float
    pue: float | None = None
    cdu_units: int | None = None
    cdu_unit_kw: float | None = None
    air_cooling_kw: float | None = None
    floor_load_kpa: float | None = None

    @property
    def cdu_usable_kw(self) -> float | None:
        if self.cdu_units is None or self.cdu_unit_kw is None:
            return None
        return max(0, self.cdu_units - 1) * self.cdu_unit_kw


@dataclass(frozen=True)
class NodeTypeSpec:
    """A node type as the planner needs it; ``rack_kw`` is set for rack-scale systems (NVL72).

    ``perf_per_gpu`` is one GPU's capacity in H100-equivalents for the plan's workload class.
    ``rack_weight_kg`` is a full rack's weight (None: not known, floor loading not checked).
    """

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
    rack_weight_kg: float | None = None
    weight_source: str = ""

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
        workload: Workload = "training",
        perf_per_gpu: float | None = None,
        perf_source: str | None = None,
    ) -> NodeTypeSpec:
        """Build from generations.csv; nodes per rack is rack kW / node kW, or the NVLink domain for rack-scale.

        The performance ratio is the row's ``training_vs_h100`` or ``inference_vs_h100`` unless
        the operator gives ``perf_per_gpu``.
        """
        row = reference_generation(gpu_model)
        if nodes_per_rack is None:
            if row.node_kw is None:
                nodes_per_rack = row.nvlink_domain_gpus // row.gpus_per_node
            elif row.rack_kw_typical is not None:
                nodes_per_rack = int((row.rack_kw_typical / row.node_kw).to_integral_value())
            else:
                raise ValueError(f"{gpu_model} has no rack figure in generations.csv: pass nodes_per_rack")
        if perf_per_gpu is None:
            ratio = row.training_vs_h100 if workload == "training" else row.inference_vs_h100
            if ratio is None:
                raise ValueError(f"{gpu_model} has no {workload} ratio in generations.csv: give perf_per_gpu")
            perf_per_gpu = float(ratio)
            perf_source = f"generations.csv {workload}_vs_h100: {row.perf_source}"
        weight: float | None = None
        weight_source = ""
        if row.rack_weight_kg is not None:
            weight = float(row.rack_weight_kg)
            weight_source = f"generations.csv rack_weight_kg: {row.perf_source}"
        elif row.node_weight_kg is not None:
            empty = parameter("empty_rack_weight")
            assert empty.high is not None
            weight = float(empty.high) + float(row.node_weight_kg) * nodes_per_rack
            weight_source = (
                f"{nodes_per_rack} x {row.node_weight_kg} kg nodes (generations.csv) + {empty.high} kg rack "
                f"(high end of empty_rack_weight: {empty.source})"
            )
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
            perf_source=perf_source or "operator input",
            rack_weight_kg=weight,
            weight_source=weight_source,
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
    """Everything the plan depends on.

    ``fleet`` is what migrates; ``kept`` are racks already holding the target generation: they
    stay, occupy their positions, draw power and count as capacity. ``capacity_floor_gpus`` and
    ``capacity_floor_perf`` (H100-equivalents for ``workload``) are floors; 0/None means no floor in
    that unit. ``burn_in_days=None`` uses the lifecycle's burn-in deadline (facility.csv).
    """

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
    kept: tuple[FleetBlock, ...] = ()
    workload: Workload = "training"


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
        """GPU-days below the raw floor, each weekly point standing for seven days."""
        return sum(max(0, floor_gpus - p.total_gpus) * 7 for p in self.points)

    def trough_perf_days(self, floor_perf: float | None) -> float:
        """H100-equivalent-days below the normalised floor (0 when there is none)."""
        if floor_perf is None:
            return 0.0
        return round(sum(max(0.0, floor_perf - p.perf_total) * 7 for p in self.points), 3)

    def first_week_holding(self, floor_gpus: int, floor_perf: float | None) -> TimelinePoint | None:
        return next(
            (
                p
                for p in self.points
                if p.total_gpus >= floor_gpus and (floor_perf is None or p.perf_total >= floor_perf - 1e-6)
            ),
            None,
        )

    def largest_job_runnable_always(self, job_gpus: int) -> bool:
        return all(p.largest_pool_gpus >= job_gpus for p in self.points)

    def within_budget(self) -> bool:
        return all(
            p.power_kw_by_hall[h] <= p.budget_kw_by_hall[h] + _EPS for p in self.points for h in p.power_kw_by_hall
        )


@dataclass(frozen=True)
class Verdicts:
    """The plan's checks; ``naive_trough_*`` are keyed by naive sequence name, in the same units."""

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
    trough_perf_days: float = 0.0
    naive_trough_perf_days: dict[str, float] = field(default_factory=dict)
    old_fleet_retired: bool = False


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
    trough_perf_days: float = 0.0
    min_capacity_perf: float = 0.0


@dataclass(frozen=True)
class MigrationPlanResult:
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
    floor_gpus: int = 0
    floor_perf: float | None = None
    perf_unit: str = "H100-equivalent (training)"

    @property
    def headline(self) -> str:
        v = self.verdicts
        if not self.feasible:
            return "INFEASIBLE: " + "; ".join(self.fixes)
        if self.floor_perf is not None:
            return (
                f"feasible: done by {self.finish}, minimum {v.min_capacity_perf:,.0f} {self.perf_unit} "
                f"({v.min_capacity_gpus:,} GPUs) on {v.min_capacity_date}, {v.trough_perf_days:,.0f} "
                f"{self.perf_unit}-days below the floor of {self.floor_perf:,.0f} (naive: "
                + ", ".join(f"{k} {n:,.0f}" for k, n in v.naive_trough_perf_days.items())
                + ")"
            )
        return (
            f"feasible: done by {self.finish}, minimum {v.min_capacity_gpus:,} GPUs on {v.min_capacity_date}, "
            f"{v.trough_gpu_days:,} GPU-days below the floor (naive: "
            + ", ".join(f"{k} {n:,}" for k, n in v.naive_trough_gpu_days.items())
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
    gpus: int = 0
    perf: float = 0.0

    def __post_init__(self) -> None:
        self.gpus = self.nodes * self.block.node_type.gpus_per_node
        self.perf = self.gpus * self.block.node_type.perf_per_gpu


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


@dataclass(frozen=True)
class _Facility:
    """Reference figures for the static and shared facility checks."""

    air_limit_kw: float
    air_limit_source: str
    rear_door_limit_kw: float
    rear_door_source: str
    residual_air_fraction: float
    residual_source: str
    footprint_m2: float
    footprint_source: str

    @classmethod
    def load(cls) -> _Facility:
        air = parameter("air_cooled_rack_limit_max")
        door = parameter("rear_door_hx_rack_range")
        residual = parameter("liquid_rack_residual_air_fraction")
        foot = parameter("rack_footprint")
        assert air.high is not None and door.high is not None and residual.high is not None and foot.low is not None
        return cls(
            float(air.high),
            f"air_cooled_rack_limit_max {air.value} kW: {air.source}",
            float(door.high),
            f"rear_door_hx_rack_range {door.value} kW: {door.source}",
            float(residual.high),
            f"high end of liquid_rack_residual_air_fraction {residual.value}: {residual.source}",
            float(foot.low),
            f"rack_footprint {foot.value} m2: {foot.source}",
        )


def _heat_split(spec: NodeTypeSpec, kw: float, fac: _Facility) -> tuple[float, float]:
    """(liquid kW, air kW) a rack of ``spec`` drawing ``kw`` rejects: liquid racks leave a residual on air."""
    if spec.cooling == "liquid":
        air = kw * fac.residual_air_fraction
        return kw - air, air
    return 0.0, kw


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
    facility: _Facility
    floor_gpus: int
    floor_perf: float | None
    perf_unit: str

    def week_of(self, day: date) -> int:
        return max(0, math.ceil((day - self.inputs.start).days / 7))

    def date_of(self, week: int) -> date:
        return self.inputs.start + timedelta(weeks=week)


def _kind_ok(spec: NodeTypeSpec, cooling: str) -> bool:
    return spec.cooling == "air-or-liquid" or (
        cooling in _AIR_POSITIONS if spec.cooling == "air" else cooling == "liquid"
    )


def _checks(spec: NodeTypeSpec, cooling: str, power_kw: float, cooling_kw: float, fac: _Facility) -> list[str]:
    """Why a rack of ``spec`` does not fit a position of this cooling/power (empty: it fits)."""
    need = spec.rack_power_kw(spec.nodes_per_rack)
    failed = []
    if not _kind_ok(spec, cooling):
        failed.append(f"needs {spec.cooling} cooling, the position is {cooling}")
    if need > power_kw + _EPS:
        failed.append(f"needs {_kw(need)} kW power, the position has {_kw(power_kw)} kW")
    if need > cooling_kw + _EPS:
        failed.append(f"needs {_kw(need)} kW cooling, the position has {_kw(cooling_kw)} kW")
    if cooling == "air" and need > fac.air_limit_kw + _EPS:
        failed.append(
            f"{_kw(need)} kW is over the air-cooled rack limit of {_kw(fac.air_limit_kw)} kW ({fac.air_limit_source})"
        )
    if cooling == "rear_door" and need > fac.rear_door_limit_kw + _EPS:
        failed.append(
            f"{_kw(need)} kW is over the rear-door limit of {_kw(fac.rear_door_limit_kw)} kW ({fac.rear_door_source})"
        )
    if cooling == "liquid" and spec.cooling == "liquid":
        _, air = _heat_split(spec, need, fac)
        if air > fac.air_limit_kw + _EPS:
            failed.append(
                f"its residual air heat of {_kw(air)} kW is over the air-cooled rack limit of {_kw(fac.air_limit_kw)} kW"
            )
    return failed


def _static_notes(spec: NodeTypeSpec, hall: Hall | None, fac: _Facility) -> tuple[list[str], list[str]]:
    """(notes, refusals) for the checks that no position upgrade changes: floor loading, hall CDU."""
    notes: list[str] = []
    refusals: list[str] = []
    need = spec.rack_power_kw(spec.nodes_per_rack)
    if spec.cooling == "liquid":
        liquid, air = _heat_split(spec, need, fac)
        notes.append(f"residual air heat {_kw(air)} kW ({fac.residual_source})")
    if hall is not None and hall.floor_load_kpa is not None and spec.rack_weight_kg is not None:
        kpa = spec.rack_weight_kg * _G / 1000 / fac.footprint_m2
        text = (
            f"floor loading {kpa:.1f} kPa ({_kw(spec.rack_weight_kg)} kg on {fac.footprint_m2:g} m2) "
            f"against the hall's {hall.floor_load_kpa:g} kPa"
        )
        (refusals if kpa > hall.floor_load_kpa + _EPS else notes).append(text)
    elif spec.rack_weight_kg is None:
        notes.append("floor loading not checked: no rack weight for this node type")
    else:
        notes.append("floor loading not checked: give the hall's floor rating (kPa)")
    if hall is not None and spec.cooling == "liquid":
        usable = hall.cdu_usable_kw
        if usable is None:
            notes.append("CDU capacity not checked: give the hall's CDU units and kW per unit")
        else:
            liquid, _ = _heat_split(spec, need, fac)
            text = (
                f"hall CDUs {hall.cdu_units} x {_kw(hall.cdu_unit_kw or 0)} kW, N+1: {_kw(usable)} kW usable, "
                f"shared; this rack needs {_kw(liquid)} kW of it"
            )
            (refusals if liquid > usable + _EPS else notes).append(text)
    return notes, refusals


def _position_verdict(spec: NodeTypeSpec, pos: Position, hall: Hall | None, fac: _Facility) -> PositionVerdict:
    need = spec.rack_power_kw(spec.nodes_per_rack)
    needs = f"{spec.name} needs {_kw(need)} kW {spec.cooling}"
    has = f"position {pos.rack} is {pos.cooling}-cooled with {_kw(pos.cooling_kw)} kW cooling, {_kw(pos.power_kw)} kW power"
    notes, refusals = _static_notes(spec, hall, fac)
    tail = "; ".join(notes)
    now = _checks(spec, pos.cooling, pos.power_kw, pos.cooling_kw, fac)
    if refusals:
        return PositionVerdict(
            pos.id, pos.hall_id, pos.rack, "never", None, f"{needs}; {has}: refused: " + "; ".join(refusals + now)
        )
    if not now:
        return PositionVerdict(pos.id, pos.hall_id, pos.rack, "ok_now", None, f"ok now: {needs}; {has}; {tail}")
    up = pos.upgrade
    if up is not None:
        power_after = pos.power_kw + up.adds_power_kw
        cooling_after = pos.cooling_kw + up.adds_cooling_kw
        after = _checks(spec, up.cooling_after, power_after, cooling_after, fac)
        if not after:
            reason = (
                f"ok after {up.kind} (lead {up.lead_time_days} days: {up.lead_time_source}; "
                f"start {up.earliest_start}, ready {up.ready}): {needs}; after it the position has "
                f"{_kw(cooling_after)} kW {up.cooling_after} cooling, {_kw(power_after)} kW power; {tail}"
            )
            return PositionVerdict(pos.id, pos.hall_id, pos.rack, "after_upgrade", up.ready, reason)
        return PositionVerdict(
            pos.id,
            pos.hall_id,
            pos.rack,
            "never",
            None,
            f"{needs}; {has}, {_kw(cooling_after)} kW {up.cooling_after} after {up.kind}: refused: " + "; ".join(after),
        )
    return PositionVerdict(pos.id, pos.hall_id, pos.rack, "never", None, f"{needs}; {has}: refused: " + "; ".join(now))


def _context(inputs: PlanInputs) -> _Context:
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
    fac = _Facility.load()
    assumptions.append(Assumption("air_rack_limit", _kw(fac.air_limit_kw), "kW", fac.air_limit_source))
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
        power = _kw(spec.rack_power_kw(spec.nodes_per_rack))
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
                Assumption(f"rack_weight[{spec.name}]", _kw(spec.rack_weight_kg), "kg", spec.weight_source)
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
            seen = memo[key] = _position_verdict(inputs.target, pos, halls.get(pos.hall_id), fac)
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
    return _Context(
        inputs=inputs,
        horizon=inputs.horizon_weeks,
        halls=halls,
        usable_kw={h.id: h.it_power_budget_kw * (1 - inputs.power_margin) for h in inputs.halls},
        pue=pue,
        eligible_week=eligible,
        burn_in_days=burn_in_days,
        service_weeks=_weeks(burn_in_days + inputs.cut_over_days),
        power_release_weeks=_weeks(inputs.drain_days + inputs.sanitise_days),
        space_release_weeks=_weeks(inputs.drain_days + inputs.sanitise_days + inputs.ship_days),
        verdicts=verdicts,
        assumptions=tuple(assumptions),
        facility=fac,
        floor_gpus=max(0, inputs.capacity_floor_gpus),
        floor_perf=floor_perf,
        perf_unit=f"H100-equivalent ({inputs.workload})",
    )


@dataclass
class _Run:
    old: list[_OldRack]
    new: list[_NewRack]
    kept: list[_OldRack]
    power: dict[str, list[float]]
    liquid: dict[str, list[float]]
    air: dict[str, list[float]]


def _racks_of(blocks: tuple[FleetBlock, ...], positions: dict[str, Position]) -> list[_OldRack]:
    racks: list[_OldRack] = []
    for block in blocks:
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


class _Load:
    """Per-hall load over the horizon built from steps that last to its end."""

    def __init__(self, halls, horizon: int):
        self.H = horizon
        self.diff = {h: [0.0] * (horizon + 1) for h in halls}
        self.suffix_max: dict[str, list[float] | None] = dict.fromkeys(halls)

    def step(self, hall_id: str, start: int, kw: float) -> None:
        self.diff[hall_id][max(0, start)] += kw
        self.suffix_max[hall_id] = None

    def _level(self, hall_id: str) -> list[float]:
        return list(accumulate(self.diff[hall_id][: self.H]))

    def peak_from(self, hall_id: str, week: int) -> float:
        cached = self.suffix_max[hall_id]
        if cached is None:
            cached = list(accumulate(reversed(self._level(hall_id)), max))[::-1]
            self.suffix_max[hall_id] = cached
        return cached[week]

    def levels(self) -> dict[str, list[float]]:
        return {h: self._level(h) for h in self.diff}


class _Floors:
    """Capacity in service during the current week, kept incrementally so each drain check is O(generations)."""

    def __init__(self, ctx: _Context):
        self.ctx = ctx
        self.gpus: dict[str, int] = defaultdict(int)
        self.perf = 0.0
        self._total = 0

    def add(self, generation: str, gpus: int, perf: float) -> None:
        self.gpus[generation] += gpus
        self._total += gpus
        self.perf += perf

    def total(self) -> int:
        return self._total

    def may_drain(self, rack: _OldRack) -> bool:
        ctx = self.ctx
        gen = rack.block.node_type.generation
        if self.total() - rack.gpus < ctx.floor_gpus:
            return False
        if ctx.floor_perf is not None and self.perf - rack.perf < ctx.floor_perf - 1e-6:
            return False
        job = ctx.inputs.largest_job_gpus
        if job > 0:
            pool = max((n - rack.gpus if g == gen else n) for g, n in self.gpus.items())
            if pool < job:
                return False
        return True

    def headroom_below(self, gpus: int, perf: float) -> bool:
        """True when no rack of at least ``gpus``/``perf`` can leave without breaking a floor."""
        ctx = self.ctx
        if self.total() - gpus < ctx.floor_gpus:
            return True
        return ctx.floor_perf is not None and self.perf - perf < ctx.floor_perf - 1e-6


def _simulate(ctx: _Context, policy: str) -> _Run:
    """Replay ``policy`` week by week; every placement respects eligibility, space, power and cooling."""
    H = ctx.horizon
    inputs = ctx.inputs
    target = inputs.target
    fac = ctx.facility
    positions = {p.id: p for p in inputs.positions}
    old = _racks_of(inputs.fleet, positions)
    kept = _racks_of(inputs.kept, positions)
    new = _new_racks(ctx)
    # Every load is a step from some week to the end of the horizon, so each hall keeps one
    # difference array per resource (O(1) per change) and rebuilds its suffix maxima only when a
    # room check finds them stale.
    power = _Load(ctx.halls, H)
    liquid = _Load(ctx.halls, H)
    air = _Load(ctx.halls, H)
    cdu_cap = {h: hall.cdu_usable_kw for h, hall in ctx.halls.items()}
    air_cap = {h: hall.air_cooling_kw for h, hall in ctx.halls.items()}
    order = {p.id: i for i, p in enumerate(inputs.positions)}
    occupied: set[str] = set()
    floors = _Floors(ctx)

    def add_load(hall_id: str, spec: NodeTypeSpec, kw: float, start: int, end: int, sign: float = 1.0) -> None:
        assert end >= H  # every load runs to the end of the horizon
        if start >= H:
            return
        lq, ar = _heat_split(spec, kw, fac)
        power.step(hall_id, start, sign * kw)
        liquid.step(hall_id, start, sign * lq)
        air.step(hall_id, start, sign * ar)

    for rack in (*old, *kept):
        occupied.add(rack.position.id)
        add_load(rack.position.hall_id, rack.block.node_type, rack.power_kw, 0, H)
        floors.add(rack.block.node_type.generation, rack.gpus, rack.perf)

    # Positions that can take a new rack enter their hall's heap the week they are eligible and empty.
    # Key: never-occupied positions first (no wait for a drain), then inventory order.
    pending: dict[int, list[tuple[tuple[bool, int], str]]] = defaultdict(list)
    heaps: dict[str, list[tuple[tuple[bool, int], str]]] = {h: [] for h in ctx.halls}
    for pos in inputs.positions:
        week = ctx.eligible_week[pos.id]
        if week is not None and pos.id not in occupied and week < H:
            pending[week].append(((False, order[pos.id]), pos.id))
    service_add: dict[int, list[_NewRack]] = defaultdict(list)

    def drain(rack: _OldRack, week: int) -> None:
        rack.drain_week = week
        spec = rack.block.node_type
        add_load(rack.position.hall_id, spec, rack.power_kw, week + ctx.power_release_weeks, H, -1.0)
        floors.add(spec.generation, -rack.gpus, -rack.perf)
        eligible = ctx.eligible_week[rack.position.id]
        if eligible is not None:
            free = max(eligible, week + ctx.space_release_weeks)
            if free < H:
                pending[free].append(((True, order[rack.position.id]), rack.position.id))

    lq_need, air_need = _heat_split(target, target.rack_power_kw(target.nodes_per_rack), fac)

    def room(hall_id: str, week: int, rack: _NewRack) -> str:
        """'' when the hall can carry ``rack`` from ``week`` on, else what it lacks."""
        lq, ar = _heat_split(target, rack.power_kw, fac)
        if power.peak_from(hall_id, week) + rack.power_kw > ctx.usable_kw[hall_id] + _EPS:
            return "no hall power room"
        cap = cdu_cap[hall_id]
        if cap is not None and lq > 0 and liquid.peak_from(hall_id, week) + lq > cap + _EPS:
            return "no CDU capacity left in the hall (N+1)"
        cap = air_cap[hall_id]
        if cap is not None and air.peak_from(hall_id, week) + ar > cap + _EPS:
            return "no room-air cooling left in the hall"
        return ""

    def land(rack: _NewRack, pos: Position, week: int) -> None:
        rack.position, rack.land_week = pos, week
        occupied.add(pos.id)
        add_load(pos.hall_id, target, rack.power_kw, week, H)
        service = week + ctx.service_weeks
        if service <= week:
            floors.add(
                target.generation,
                rack.nodes * target.gpus_per_node,
                rack.nodes * target.gpus_per_node * target.perf_per_gpu,
            )
        elif service < H:
            service_add[service].append(rack)

    halls_with_eligible = {p.hall_id for p in inputs.positions if ctx.eligible_week[p.id] is not None}
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
    swap_next = 0
    undrained = list(drain_order)
    min_gpus = min((r.gpus for r in old), default=0)
    min_perf = min((r.perf for r in old), default=0.0)
    waiting: list[_NewRack] = []
    due: dict[int, list[_NewRack]] = defaultdict(list)
    for rack in new:
        if rack.due_week < H:
            due[rack.due_week].append(rack)
        else:
            rack.wait_reason = "delivered after the horizon"
    eligible_untaken = 0  # eligible-by-now positions without a new rack (for wait reasons)
    eligible_from: dict[int, int] = defaultdict(int)
    for pos in inputs.positions:
        week = ctx.eligible_week[pos.id]
        if week is not None:
            eligible_from[min(week, H)] += 1

    for w in range(H):
        eligible_untaken += eligible_from.get(w, 0)
        for rack in service_add.pop(w, ()):
            floors.add(
                target.generation,
                rack.nodes * target.gpus_per_node,
                rack.nodes * target.gpus_per_node * target.perf_per_gpu,
            )
        if policy == DECOMMISSION_FIRST and w == 0:
            for rack in old:
                drain(rack, 0)
            undrained = []
        arrivals = due.pop(w, [])
        if policy == ONE_FOR_ONE_SWAP:
            for rack in arrivals:
                if swap_next < len(swap_positions):
                    rack.swap = swap_positions[swap_next]
                    swap_next += 1
                    drain(rack.swap, w)
        for item in pending.pop(w, ()):
            heapq.heappush(heaps[positions[item[1]].hall_id], item)
        waiting.extend(arrivals)
        if policy == ONE_FOR_ONE_SWAP:
            still = []
            for rack in waiting:
                if rack.swap is None:
                    rack.wait_reason = "no old rack in a position that can take it to swap with"
                    still.append(rack)
                    continue
                pos = rack.swap.position
                eligible = ctx.eligible_week[pos.id]
                drained = rack.swap.drain_week or 0
                if eligible is None or max(eligible, drained + ctx.space_release_weeks) > w:
                    rack.wait_reason = "its swap position is not free or not ready yet"
                    still.append(rack)
                    continue
                reason = room(pos.hall_id, w, rack)
                if reason:
                    rack.wait_reason = reason
                    still.append(rack)
                    continue
                land(rack, pos, w)
                eligible_untaken -= 1
            waiting = still
        else:
            landed = 0
            for rack in waiting:
                best: tuple[tuple[bool, int], str] | None = None
                reasons = []
                for hall_id, heap in heaps.items():
                    if not heap:
                        continue
                    reason = room(hall_id, w, rack)
                    if reason:
                        reasons.append(reason)
                    elif best is None or heap[0] < best:
                        best = heap[0]
                if best is None:
                    if reasons:
                        why = reasons[0]
                    elif eligible_untaken <= 0:
                        why = "no position able to take it yet (facility)"
                    else:
                        why = "eligible positions still hold old racks"
                    for later in waiting[landed:]:
                        later.wait_reason = why
                    break
                pos = positions[best[1]]
                heapq.heappop(heaps[pos.hall_id])
                land(rack, pos, w)
                eligible_untaken -= 1
                landed += 1
            waiting = waiting[landed:]
        if policy == PLAN and undrained:
            if not floors.headroom_below(min_gpus, min_perf):
                left = []
                for i, rack in enumerate(undrained):
                    if floors.headroom_below(min_gpus, min_perf):
                        left.extend(undrained[i:])
                        break
                    if floors.may_drain(rack):
                        drain(rack, w)
                    else:
                        left.append(rack)
                undrained = left
    return _Run(old, new, kept, power.levels(), liquid.levels(), air.levels())


def _timeline(ctx: _Context, run: _Run) -> Timeline:
    inputs = ctx.inputs
    target = inputs.target
    H = ctx.horizon
    budgets = {h.id: h.it_power_budget_kw for h in inputs.halls}
    generations = sorted({b.node_type.generation for b in (*inputs.fleet, *inputs.kept)} | {target.generation})
    gpus_d = {g: [0] * (H + 1) for g in generations}
    perf_d = {g: [0.0] * (H + 1) for g in generations}

    def span(gen: str, gpus: int, perf: float, start: int, end: int) -> None:
        start, end = max(0, min(H, start)), max(0, min(H, end))
        if start < end:
            gpus_d[gen][start] += gpus
            gpus_d[gen][end] -= gpus
            perf_d[gen][start] += perf
            perf_d[gen][end] -= perf

    for rack in run.old:
        end = H if rack.drain_week is None else rack.drain_week
        span(rack.block.node_type.generation, rack.gpus, rack.perf, 0, end)
    for rack in run.kept:
        span(rack.block.node_type.generation, rack.gpus, rack.perf, 0, H)
    for rack in run.new:
        if rack.land_week is not None:
            g = rack.nodes * target.gpus_per_node
            span(target.generation, g, g * target.perf_per_gpu, rack.land_week + ctx.service_weeks, H)
    points = []
    gpus = dict.fromkeys(generations, 0)
    perf = dict.fromkeys(generations, 0.0)
    for t in range(H):
        for g in generations:
            gpus[g] += gpus_d[g][t]
            perf[g] += perf_d[g][t]
        kw = {h: run.power[h][t] for h in budgets}
        points.append(
            TimelinePoint(
                date=ctx.date_of(t),
                total_gpus=sum(gpus.values()),
                gpus_by_generation=dict(gpus),
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


def _floor_text(ctx: _Context) -> str:
    parts = []
    if ctx.floor_perf is not None:
        parts.append(f"{ctx.floor_perf:,.0f} {ctx.perf_unit}")
    if ctx.floor_gpus or ctx.floor_perf is None:
        parts.append(f"{ctx.floor_gpus:,} GPUs")
    return " and ".join(parts)


def _naive(ctx: _Context, name: str) -> NaiveSequence:
    inputs = ctx.inputs
    run = _simulate(ctx, name)
    timeline = _timeline(ctx, run)
    low = timeline.min_capacity()
    trough = timeline.trough_gpu_days(ctx.floor_gpus)
    trough_perf = timeline.trough_perf_days(ctx.floor_perf)
    low_perf = min(p.perf_total for p in timeline.points)
    stranded = sum(1 for r in run.new if r.land_week is None)
    if ctx.floor_perf is not None:
        notes = [
            f"capacity falls to {low_perf:,.0f} {ctx.perf_unit} ({low.total_gpus:,} GPUs); "
            f"{trough_perf:,.0f} {ctx.perf_unit}-days below the floor"
        ]
    else:
        notes = [f"capacity falls to {low.total_gpus:,} GPUs on {low.date}; {trough:,} GPU-days below the floor"]
    if stranded:
        notes.append(f"{stranded} delivered racks never land within the horizon")
    if name == DECOMMISSION_FIRST:
        first_ok = timeline.first_week_holding(ctx.floor_gpus, ctx.floor_perf)
        if (trough or trough_perf) and first_ok is not None:
            weeks = (first_ok.date - inputs.start).days // 7
            notes.append(
                f"delay draining the old fleet by {weeks} weeks (to {first_ok.date}) to hold the floor of "
                f"{_floor_text(ctx)}"
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
        trough_perf_days=trough_perf,
        min_capacity_perf=round(low_perf, 6),
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
            notes.append(f"{target.name} can join the existing {fabric} fabric ({peak:,} endpoints at the peak)")
    gens = sorted(timeline.points[0].gpus_by_generation)
    pools = ", ".join(f"{g} up to {max(p.gpus_by_generation[g] for p in timeline.points):,} GPUs" for g in gens)
    notes.append(f"jobs never span generations; largest pool per generation: {pools}")
    if target.rack_scale:
        notes.append(f"{target.name}: NVLink domain of {target.gpus_per_rack} GPUs per rack")
    return tuple(notes)


def _more_racks(ctx: _Context, short_gpus: int, short_perf: float) -> tuple[int, int]:
    """(GPUs, racks) of the target that cover a shortfall in either unit."""
    target = ctx.inputs.target
    gpus = max(short_gpus, math.ceil(short_perf / target.perf_per_gpu - 1e-9) if short_perf > 0 else 0)
    return gpus, math.ceil(gpus / target.gpus_per_rack)


def _fixes(ctx: _Context, run: _Run, timeline: Timeline) -> list[str]:
    """Concrete changes to the inputs, in the floor's unit, that would remove each reason for infeasibility."""
    inputs = ctx.inputs
    target = inputs.target
    H = ctx.horizon
    fixes: list[str] = []
    first = timeline.points[0]
    unit = ctx.perf_unit
    for hall in inputs.halls:
        initial = sum(r.power_kw for r in (*run.old, *run.kept) if r.position.hall_id == hall.id)
        if initial > ctx.usable_kw[hall.id] + _EPS:
            raise_by = math.ceil(initial / (1 - inputs.power_margin) - hall.it_power_budget_kw)
            fixes.append(
                f"raise hall {hall.id} budget by {raise_by} kW: the current fleet draws {_kw(initial)} kW "
                f"against {_kw(ctx.usable_kw[hall.id])} kW usable"
            )
    if first.total_gpus < ctx.floor_gpus:
        fixes.append(
            f"lower the capacity floor to {first.total_gpus} GPUs: the fleet has only {first.total_gpus} at the start"
        )
    if ctx.floor_perf is not None and first.perf_total < ctx.floor_perf - 1e-6:
        fixes.append(
            f"lower the capacity floor to {math.floor(first.perf_total):,} {unit}: the fleet has only "
            f"{first.perf_total:,.1f} at the start"
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
        kept_positions = {r.position.id for r in run.kept}
        in_horizon = [p for p in eligible if (ctx.eligible_week[p.id] or 0) < H and p.id not in kept_positions]
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
        used = {r.position.id for r in run.new if r.position is not None}
        held = {r.position.id for r in run.old if r.drain_week is None}
        free_by_hall: dict[str, int] = defaultdict(int)
        for pos in in_horizon:
            if pos.id not in used and pos.id not in held:
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
            cap = ctx.halls[hall_id].cdu_usable_kw
            lq, _ = _heat_split(target, unlanded[0].power_kw, ctx.facility)
            if cap is not None and lq > 0:
                need_lq = max(run.liquid[hall_id][due:] or [0.0]) + n * lq - cap
                unit_kw = ctx.halls[hall_id].cdu_unit_kw or 0
                if need_lq > _EPS and unit_kw > 0:
                    fixes.append(
                        f"add {math.ceil(need_lq / unit_kw)} CDU units of {_kw(unit_kw)} kW in hall {hall_id} "
                        f"so {n} more {target.name} racks fit ({_kw(need_lq)} kW of liquid heat over the N+1 capacity)"
                    )
        # Positions still held by old racks the floors would not let go.
        blocked = [r for r in run.old if r.drain_week is None and ctx.eligible_week[r.position.id] is not None]
        blocked = blocked[: max(0, left)]
        if blocked:
            gpus = sum(r.gpus for r in blocked)
            perf = sum(r.perf for r in blocked)
            low = timeline.min_capacity()
            if ctx.floor_perf is not None:
                lowest_perf = min(p.perf_total for p in timeline.points)
                fixes.append(
                    f"lower the capacity floor to {max(0, math.floor(lowest_perf - perf)):,} {unit} "
                    f"(or add {len(blocked)} positions that can take {target.name}): {len(blocked)} old racks "
                    f"({perf:,.1f} {unit}) hold the positions the new racks need and cannot leave first"
                )
            else:
                fixes.append(
                    f"lower the capacity floor to {max(0, low.total_gpus - gpus):,} GPUs (or add {len(blocked)} "
                    f"positions that can take {target.name}): {len(blocked)} old racks ({gpus:,} GPUs) hold the "
                    f"positions the new racks need and cannot leave first"
                )
        if not fixes:
            fixes.append(
                f"{len(unlanded)} {target.name} racks cannot land: add positions for {target.name} ({spec_need})"
            )
    if late:
        need_weeks = max(r.land_week + ctx.service_weeks for r in late if r.land_week is not None) + 1
        fixes.append(
            f"deliver {len(late)} racks earlier or extend the horizon to {need_weeks + ctx.space_release_weeks} weeks: "
            f"they would not be in service before {ctx.date_of(H)}"
        )
    remaining = [r for r in run.old if r.drain_week is None]
    if remaining and not unlanded and not late:
        new_gpus = sum(r.nodes for r in run.new) * target.gpus_per_node + sum(r.gpus for r in run.kept)
        new_perf = sum(r.nodes for r in run.new) * target.gpus_per_node * target.perf_per_gpu + sum(
            r.perf for r in run.kept
        )
        old_left = sum(r.gpus for r in remaining)
        short_gpus = max(0, ctx.floor_gpus - new_gpus)
        short_perf = max(0.0, (ctx.floor_perf or 0.0) - new_perf)
        pool = new_gpus
        if short_gpus or short_perf > 1e-6:
            gpus, racks = _more_racks(ctx, short_gpus, short_perf)
            have = f"{new_perf:,.1f} {unit}" if short_perf > 1e-6 else f"{new_gpus:,} GPUs"
            fixes.append(
                f"deliver {racks} more {target.name} racks ({gpus:,} GPUs), or lower the floor to {have}: the new "
                f"fleet of {have} cannot hold the floor of {_floor_text(ctx)} alone, so {old_left:,} old GPUs "
                f"cannot be retired"
            )
        elif pool < inputs.largest_job_gpus:
            gpus, racks = _more_racks(ctx, inputs.largest_job_gpus - pool, 0.0)
            fixes.append(
                f"deliver {racks} more {target.name} racks ({gpus:,} GPUs) or lower the largest job to {pool:,} GPUs: "
                f"the largest job of {inputs.largest_job_gpus:,} needs one pool of that size"
            )
        else:
            fixes.append(
                f"extend the horizon beyond {H} weeks or deliver earlier: {len(remaining)} old racks "
                f"({old_left:,} GPUs) are still in service at {ctx.date_of(H)}"
            )
    return fixes


def plan_migration(inputs: PlanInputs) -> MigrationPlanResult:
    """Plan moving ``inputs.fleet`` onto ``inputs.target``; pure and deterministic."""
    ctx = _context(inputs)
    run = _simulate(ctx, PLAN)
    timeline = _timeline(ctx, run)
    naive = (_naive(ctx, DECOMMISSION_FIRST), _naive(ctx, ONE_FOR_ONE_SWAP))
    fixes = _fixes(ctx, run, timeline)
    phases = _phases(ctx, run, with_prep=True)
    low = timeline.min_capacity()
    floor_held = all(p.total_gpus >= ctx.floor_gpus for p in timeline.points) and (
        ctx.floor_perf is None or all(p.perf_total >= ctx.floor_perf - 1e-6 for p in timeline.points)
    )
    verdicts = Verdicts(
        facility_first_ok=all(
            ctx.eligible_week[r.position.id] is not None
            and (ctx.eligible_week[r.position.id] or 0) <= (r.land_week or 0)
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
        trough_gpu_days=timeline.trough_gpu_days(ctx.floor_gpus),
        naive_trough_gpu_days={n.name: n.trough_gpu_days for n in naive},
        trough_perf_days=timeline.trough_perf_days(ctx.floor_perf),
        naive_trough_perf_days={n.name: n.trough_perf_days for n in naive},
        old_fleet_retired=all(r.drain_week is not None for r in run.old),
    )
    feasible = not fixes and verdicts.never_exceeds_power_budget and floor_held and verdicts.largest_job_runnable_always
    notes = []
    for rack in run.new:
        if rack.land_week is not None and rack.land_week > rack.due_week:
            notes.append(
                f"rack {rack.id} (delivery {rack.delivery.date}) waited {rack.land_week - rack.due_week} weeks: "
                f"{rack.wait_reason}"
            )
    if run.kept:
        notes.append(
            f"{len(run.kept)} racks already hold {target_name(inputs)}: they stay, occupy their positions, draw "
            f"{_kw(sum(r.power_kw for r in run.kept))} kW and count {sum(r.gpus for r in run.kept):,} GPUs"
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
    return MigrationPlanResult(
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
        floor_gpus=ctx.floor_gpus,
        floor_perf=ctx.floor_perf,
        perf_unit=ctx.perf_unit,
    )


@dataclass(frozen=True)
class PowerReuse:
    """Week by week, the kW drained old racks free and the part of it new racks actually use.

    ``reused_kw`` is the new racks' draw beyond the hall's spare power at the start, capped at
    what drains have freed by then (power counts as freed once sanitisation ends). Hall by
    hall: power freed in one hall is not reused by racks landing in another.
    """

    dates: tuple[date, ...]
    freed_kw: tuple[float, ...]
    reused_kw: tuple[float, ...]

    @property
    def total_freed_kw(self) -> float:
        return self.freed_kw[-1] if self.freed_kw else 0.0

    def first_reuse(self) -> date | None:
        return next((d for d, kw in zip(self.dates, self.reused_kw) if kw > _EPS), None)

    def kw_months(self, start: date, months: int) -> float:
        """Reused kW-months from ``start`` for ``months``; after the plan's horizon reuse stays at its last level."""
        end = start + timedelta(days=round(months * 365 / 12))
        total = 0.0
        last = self.dates[-1] + timedelta(days=7) if self.dates else start
        for day, kw in zip(self.dates, self.reused_kw):
            lo, hi = max(day, start), min(day + timedelta(days=7), end)
            if hi > lo:
                total += kw * (hi - lo).days
        if self.reused_kw and end > max(last, start):
            total += self.reused_kw[-1] * (end - max(last, start)).days
        return total / (365 / 12)


def power_reuse(inputs: PlanInputs, plan: MigrationPlanResult) -> PowerReuse:
    """What the plan frees and reuses, from its phases and placements (pure)."""
    ctx = _context(inputs)
    positions = {p.id: p for p in inputs.positions}
    old_kw = {r.position.id: r.power_kw for r in _racks_of(inputs.fleet, positions)}
    initial = defaultdict(float)
    for r in (*_racks_of(inputs.fleet, positions), *_racks_of(inputs.kept, positions)):
        initial[r.position.hall_id] += r.power_kw
    spare = {h: max(0.0, ctx.usable_kw[h] - initial[h]) for h in ctx.halls}
    released: list[tuple[date, str, float]] = []
    for phase in plan.phases:
        if phase.kind == "sanitise":
            for pid in phase.position_ids:
                released.append((phase.end, positions[pid].hall_id, old_kw.get(pid, 0.0)))
    landed = [(pl.land, pl.hall_id, inputs.target.rack_power_kw(pl.nodes)) for pl in plan.placements]
    dates, freed_series, reused_series = [], [], []
    for point in plan.timeline.points:
        day = point.date
        freed = defaultdict(float)
        new = defaultdict(float)
        for when, hall, kw in released:
            if when <= day:
                freed[hall] += kw
        for when, hall, kw in landed:
            if when <= day:
                new[hall] += kw
        reused = sum(min(freed[h], max(0.0, new[h] - spare.get(h, 0.0))) for h in ctx.halls)
        dates.append(day)
        freed_series.append(round(sum(freed.values()), 6))
        reused_series.append(round(reused, 6))
    return PowerReuse(tuple(dates), tuple(freed_series), tuple(reused_series))


def target_name(inputs: PlanInputs) -> str:
    return inputs.target.name


def demo_inputs(
    *,
    start: date = date(2026, 7, 6),
    hall2_budget_kw: float = 2400.0,
    delivery_weeks: tuple[int, ...] = (4, 12),
    capacity_floor_gpus: int = 0,
    capacity_floor_perf: float | None = 2048.0,
    largest_job_gpus: int = 1024,
    workload: Workload = "training",
) -> PlanInputs:
    """The demo fleet: 256 H100 nodes (2,048 GPUs) on air in hall 1, moving to GB200-NVL72.

    Hall 1 has 128 air positions of 20.4 kW holding two H100 nodes each; its last 16
    positions can get a CDU (cited lead time, high end) that makes them 140 kW liquid.
    Hall 2 has 16 liquid positions of 140 kW, three 1,000 kW CDUs (N+1: 2,000 kW usable)
    and a 24 kPa slab (demo operator inputs). By default two 8-rack scalable units arrive
    in weeks 4 and 12, the floor is 2,048 H100-equivalents (today's capacity) and a
    1,024-GPU job must always fit.
    """
    h100 = NodeTypeSpec.from_reference("H100-SXM5-80GB", name="h100-sxm-8x", workload=workload)
    gb200 = NodeTypeSpec.from_reference("GB200-NVL72", name="GB200-NVL72", workload=workload)
    cdu = FacilityUpgrade.cdu_install(earliest_start=start, adds_power_kw=119.6, adds_cooling_kw=119.6)
    hall1 = [
        Position(f"H1-R{i:03d}", "H1", f"H1-R{i:03d}", "air", 20.4, 20.4, cdu if i > 112 else None)
        for i in range(1, 129)
    ]
    hall2 = [Position(f"H2-R{i:03d}", "H2", f"H2-R{i:03d}", "liquid", 140.0, 140.0) for i in range(1, 17)]
    su_nodes = 8 * gb200.nodes_per_rack
    return PlanInputs(
        start=start,
        halls=(
            Hall("H1", "hall 1", 2800.0),
            Hall("H2", "hall 2", hall2_budget_kw, cdu_units=3, cdu_unit_kw=1000.0, floor_load_kpa=24.0),
        ),
        positions=tuple(hall1 + hall2),
        fleet=(FleetBlock("h100-hall1", h100, 256, tuple(p.id for p in hall1)),),
        target=gb200,
        deliveries=tuple(
            Delivery(start + timedelta(weeks=w), 1, su_nodes, f"SU{i + 1}") for i, w in enumerate(delivery_weeks)
        ),
        capacity_floor_gpus=capacity_floor_gpus,
        capacity_floor_perf=capacity_floor_perf,
        largest_job_gpus=largest_job_gpus,
        workload=workload,
    )
