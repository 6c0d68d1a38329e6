"""What the migration planner answers: position verdicts, phases, placements, the weekly
timeline, naive sequences, verdicts and the whole ``MigrationPlanResult``."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date

from planning.engines.migration.inputs import EPS, Assumption, PhaseKind, VerdictStatus


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
class DrainItem:
    """One old rack's drain: when it starts, is drained, sanitised and shipped, what it frees and
    for what (``frees``: position, power or retirement), and the week what it frees is first used."""

    position_id: str
    rack: str
    hall_id: str
    block: str
    node_type: str
    nodes: int
    gpus: int
    kw: float
    start: date
    drained: date
    sanitised: date
    shipped: date
    reason: str
    frees: str
    used: date | None


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
    largest_pool_perf: float = 0.0
    cabled_gpus: int = 0
    floor_perf: float | None = None
    drained_perf: float = 0.0


@dataclass(frozen=True)
class Timeline:
    """Weekly points from the start date to the end of the horizon."""

    points: tuple[TimelinePoint, ...]

    def min_capacity(self) -> TimelinePoint:
        return min(self.points, key=lambda p: (p.total_gpus, p.date))

    def trough_gpu_days(self, floor_gpus: int) -> int:
        """GPU-days below the raw floor, each weekly point standing for seven days."""
        return sum(max(0, floor_gpus - p.total_gpus) * 7 for p in self.points)

    def trough_perf_days(self) -> float:
        """Normalised-unit-days the plan's own drains took capacity below the floor in force: below
        the floor, or below what would be in service had nothing drained where that is lower
        (a forecast's need that deliveries do not meet yet is not the plan's trough)."""
        return round(
            sum(
                max(0.0, min(p.floor_perf, p.perf_total + p.drained_perf) - p.perf_total) * 7
                for p in self.points
                if p.floor_perf is not None
            ),
            3,
        )

    def need_shortfall_perf_days(self) -> float:
        """Normalised-unit-days the floor in force exceeds what would be in service had nothing drained."""
        return round(
            sum(
                max(0.0, p.floor_perf - (p.perf_total + p.drained_perf)) * 7
                for p in self.points
                if p.floor_perf is not None
            ),
            3,
        )

    def given_up_perf_days(self) -> float:
        """Normalised-unit-days below today's capacity: what drains gave up before new capacity replaced it."""
        if not self.points:
            return 0.0
        start = self.points[0].perf_total
        return round(sum(max(0.0, start - p.perf_total) * 7 for p in self.points), 3)

    def first_week_holding(self, floor_gpus: int) -> TimelinePoint | None:
        return next(
            (
                p
                for p in self.points
                if p.total_gpus >= floor_gpus and (p.floor_perf is None or p.perf_total >= p.floor_perf - 1e-6)
            ),
            None,
        )

    def largest_job_runnable_always(self, job_perf: float) -> bool:
        return all(p.largest_pool_perf >= job_perf - 1e-6 for p in self.points)

    def within_budget(self) -> bool:
        return all(
            p.power_kw_by_hall[h] <= p.budget_kw_by_hall[h] + EPS for p in self.points for h in p.power_kw_by_hall
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
    given_up_perf_days: float = 0.0
    need_met_always: bool = True
    need_shortfall_perf_days: float = 0.0
    peak_cabled_gpus: int = 0


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
    given_up_perf_days: float = 0.0


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
    drains: tuple[DrainItem, ...] = ()
    binding_constraints: tuple[str, ...] = ()
    largest_job_perf: float = 0.0
    # The week the migration is complete: every new rack in service and every old rack out of service
    # (draining); ``finish`` adds the old racks' sanitisation and shipping.
    complete: date | None = None

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
