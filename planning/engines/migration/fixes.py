"""What would make an infeasible plan work, each change computed exactly.

A fix changes one input: a hall's budget, its CDU units or room air, a facility upgrade's start,
the deliveries, the floor, the largest job or the horizon. Its size is found by replaying the plan
(the same simulation, without the naive sequences) with that input changed: first at the most it
could be changed, to see whether that input binds at all and what the most of it achieves, then
by bisection on whole units (kW, CDU units, weeks, racks, H100s, units of the floor) for the
smallest change that achieves as much. Every binding input gets its own fix, so an operator sees
every constraint; a fix that alone does not make the plan feasible says what it does achieve.
Budget fixes state the power margin they keep.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from planning.engines.migration.context import PlanContext, build_context
from planning.engines.migration.facility import kw_text
from planning.engines.migration.inputs import EPS, PLAN, Delivery, PlanInputs
from planning.engines.migration.naive import floor_text
from planning.engines.migration.results import Timeline
from planning.engines.migration.schedule import WAIT_FACILITY, Run, build_timeline, simulate

MAX_HORIZON_WEEKS = 260
MAX_BUDGET_KW = 10_000_000
MAX_CDU_UNITS = 1000


def core_feasible(ctx: PlanContext, run: Run, timeline: Timeline) -> bool:
    """The plan lands every delivery in service within the horizon, retires the old fleet, holds every
    floor and the largest job, and keeps every hall within its budget."""
    H = ctx.horizon
    return (
        all(r.land_week is not None and r.land_week + ctx.service_weeks < H for r in run.new)
        and all(r.drain_week is not None for r in run.old)
        and timeline.within_budget()
        and all(p.total_gpus >= ctx.floor_gpus for p in timeline.points)
        and timeline.trough_perf_days() == 0
        and timeline.largest_job_runnable_always(ctx.job_perf)
    )


@dataclass(frozen=True)
class Outcome:
    feasible: bool
    unlanded: int
    late: int
    remaining: int
    finish_week: int

    @property
    def score(self) -> tuple:
        return (self.feasible, -self.unlanded, -self.late, -self.remaining)


def outcome(inputs: PlanInputs) -> Outcome:
    """Replay the plan alone on ``inputs``."""
    ctx = build_context(inputs)
    run = simulate(ctx, PLAN)
    timeline = build_timeline(ctx, run)
    H = ctx.horizon
    return Outcome(
        core_feasible(ctx, run, timeline),
        sum(1 for r in run.new if r.land_week is None),
        sum(1 for r in run.new if r.land_week is not None and r.land_week + ctx.service_weeks >= H),
        sum(1 for r in run.old if r.drain_week is None),
        max((r.drain_week for r in run.old if r.drain_week is not None), default=0),
    )


def _smallest(lo: int, hi: int, ok: Callable[[int], bool]) -> int:
    """The smallest x in (lo, hi] with ``ok(x)``, given ok(hi) and not ok(lo), ok monotone."""
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi


def _largest(lo: int, hi: int, ok: Callable[[int], bool]) -> int:
    """The largest x in [lo, hi) with ``ok(x)``, given ok(lo) and not ok(hi), ok monotone."""
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid
    return lo


def _achieves(current: Outcome, best: Outcome) -> str:
    if best.feasible:
        return "makes the plan feasible"
    parts = []
    if best.unlanded < current.unlanded:
        parts.append(f"lands {current.unlanded - best.unlanded} more delivered racks")
    if best.late < current.late:
        parts.append(f"puts {current.late - best.late} more racks in service within the horizon")
    if best.remaining < current.remaining:
        parts.append(f"retires {current.remaining - best.remaining} more old racks")
    return (", ".join(parts) or "improves the plan") + " (still infeasible alone: see the other fixes)"


class _Search:
    def __init__(self, ctx: PlanContext, current: Outcome):
        self.ctx = ctx
        self.inputs = ctx.inputs
        self.current = current
        self.memo: dict[PlanInputs, Outcome] = {}

    def run(self, inputs: PlanInputs) -> Outcome:
        if inputs not in self.memo:
            self.memo[inputs] = outcome(inputs)
        return self.memo[inputs]

    def better(self, inputs: PlanInputs) -> Outcome | None:
        """The outcome of ``inputs`` when it beats the plan's own, else None."""
        got = self.run(inputs)
        return got if got.score > self.current.score else None


def _with_hall(inputs: PlanInputs, hall_id: str, **changes) -> PlanInputs:
    halls = tuple(dataclasses.replace(h, **changes) if h.id == hall_id else h for h in inputs.halls)
    return dataclasses.replace(inputs, halls=halls)


def _budget_fixes(s: _Search) -> list[str]:
    inputs = s.inputs
    margin = inputs.power_margin
    fixes = []
    for hall in inputs.halls:
        best = s.better(_with_hall(inputs, hall.id, it_power_budget_kw=hall.it_power_budget_kw + MAX_BUDGET_KW))
        if best is None:
            continue

        def ok(x: int, hall=hall, best=best) -> bool:
            return (
                s.run(_with_hall(inputs, hall.id, it_power_budget_kw=hall.it_power_budget_kw + x)).score >= best.score
            )

        hi = 1
        while not ok(hi):
            hi *= 2
        x = _smallest(hi // 2 if hi > 1 else 0, hi, ok)
        budget = hall.it_power_budget_kw + x
        fixes.append(
            f"raise hall {hall.id} budget by {x:,} kW (to {kw_text(budget)} kW: {budget * (1 - margin):,.2f} kW "
            f"usable after the {margin:.0%} power margin): {_achieves(s.current, best)}"
        )
    return fixes


def _cooling_fixes(s: _Search) -> list[str]:
    inputs, ctx = s.inputs, s.ctx
    fixes = []
    for hall in inputs.halls:
        if hall.cdu_units is not None and hall.cdu_unit_kw:
            best = s.better(_with_hall(inputs, hall.id, cdu_units=hall.cdu_units + MAX_CDU_UNITS))
            if best is not None:

                def ok(k: int, hall=hall, best=best) -> bool:
                    return s.run(_with_hall(inputs, hall.id, cdu_units=hall.cdu_units + k)).score >= best.score

                k = _smallest(0, MAX_CDU_UNITS, ok)
                fixes.append(
                    f"add {k} CDU units of {kw_text(hall.cdu_unit_kw)} kW in hall {hall.id} (N+1 keeps one spare): "
                    f"{_achieves(s.current, best)}"
                )
        air = ctx.air_cap.get(hall.id)
        if air is not None:
            best = s.better(_with_hall(inputs, hall.id, air_cooling_kw=air + MAX_BUDGET_KW))
            if best is not None:

                def ok_air(x: int, hall=hall, best=best, air=air) -> bool:
                    return s.run(_with_hall(inputs, hall.id, air_cooling_kw=air + x)).score >= best.score

                hi = 1
                while not ok_air(hi):
                    hi *= 2
                x = _smallest(hi // 2 if hi > 1 else 0, hi, ok_air)
                fixes.append(
                    f"add {x:,} kW of room-air cooling in hall {hall.id} (to {kw_text(air + x)} kW; liquid racks leave "
                    f"{ctx.facility.residual_air_fraction:g} of their heat on air): {_achieves(s.current, best)}"
                )
    return fixes


def _upgrade_fixes(s: _Search) -> list[str]:
    inputs, ctx = s.inputs, s.ctx
    groups: dict[tuple, list[str]] = {}
    for pos in inputs.positions:
        if pos.upgrade is not None and ctx.eligible_week[pos.id] is not None:
            groups.setdefault((pos.upgrade.kind, pos.upgrade.earliest_start, pos.upgrade.lead_time_days), []).append(
                pos.id
            )
    fixes = []
    for (kind, earliest, lead), ids in sorted(groups.items()):
        ready_week = ctx.eligible_week[ids[0]] or 0
        if ready_week <= 0:
            continue
        chosen = set(ids)

        def moved(k: int, chosen=chosen) -> PlanInputs:
            return dataclasses.replace(
                inputs,
                positions=tuple(
                    dataclasses.replace(
                        p,
                        upgrade=dataclasses.replace(
                            p.upgrade, earliest_start=p.upgrade.earliest_start - timedelta(weeks=k)
                        ),
                    )
                    if p.id in chosen and p.upgrade is not None
                    else p
                    for p in inputs.positions
                ),
            )

        best = s.better(moved(ready_week))
        if best is None:
            continue
        k = _smallest(0, ready_week, lambda k, best=best: s.run(moved(k)).score >= best.score)
        racks = [p.rack for p in inputs.positions if p.id in chosen]
        ready = ctx.date_of(0) + timedelta(days=(earliest - ctx.date_of(0)).days + lead) - timedelta(weeks=k)
        fixes.append(
            f"start the {kind} for {len(racks)} positions ({racks[0]}..{racks[-1]}) {k} weeks earlier "
            f"(ready {ready} instead of {earliest + timedelta(days=lead)}): {_achieves(s.current, best)}"
        )
    return fixes


def _horizon_fix(s: _Search) -> list[str]:
    inputs = s.inputs
    H = inputs.horizon_weeks
    if H >= MAX_HORIZON_WEEKS:
        return []
    best = s.better(dataclasses.replace(inputs, horizon_weeks=MAX_HORIZON_WEEKS))
    if best is None:
        return []
    w = _smallest(
        H, MAX_HORIZON_WEEKS, lambda w: s.run(dataclasses.replace(inputs, horizon_weeks=w)).score >= best.score
    )
    return [f"extend the horizon to {w} weeks: {_achieves(s.current, best)}"]


def _racks_fix(s: _Search) -> list[str]:
    inputs, ctx = s.inputs, s.ctx
    target = inputs.target
    if not inputs.deliveries:
        return []
    last = max(d.date for d in inputs.deliveries)
    kept = {pid for b in inputs.kept for pid in b.position_ids}
    eligible = sum(
        1
        for p in inputs.positions
        if ctx.eligible_week[p.id] is not None and ctx.eligible_week[p.id] < ctx.horizon and p.id not in kept
    )
    new_racks = sum(math.ceil(d.nodes / target.nodes_per_rack) for d in inputs.deliveries)
    room = eligible - new_racks
    if room <= 0:
        return []

    def more(n: int) -> PlanInputs:
        extra = Delivery(last, 1, n * target.nodes_per_rack, "fix")
        return dataclasses.replace(inputs, deliveries=(*inputs.deliveries, extra))

    best = s.better(more(room))
    if best is None or best.remaining >= s.current.remaining:
        return []
    n = _smallest(0, room, lambda n: s.run(more(n)).score >= best.score)
    gpus = n * target.gpus_per_rack
    return [
        f"deliver {n} more {target.name} racks with the last delivery ({n} x {target.gpus_per_rack} = {gpus:,} GPUs, "
        f"{gpus * target.perf_per_gpu:,.1f} {ctx.perf_unit}): {_achieves(s.current, best)}"
    ]


def _floor_fixes(s: _Search) -> list[str]:
    inputs, ctx = s.inputs, s.ctx
    fixes = []
    if inputs.capacity_floor_perf and not inputs.floor_steps:
        floor = float(inputs.capacity_floor_perf)
        best = s.better(dataclasses.replace(inputs, capacity_floor_perf=0.0))
        if best is not None:
            top = math.ceil(floor)
            f = _largest(
                0, top, lambda f: s.run(dataclasses.replace(inputs, capacity_floor_perf=float(f))).score >= best.score
            )
            fixes.append(
                f"lower the capacity floor from {floor:,.1f} to {f:,} {ctx.perf_unit}: {_achieves(s.current, best)}"
            )
    if inputs.capacity_floor_gpus:
        best = s.better(dataclasses.replace(inputs, capacity_floor_gpus=0))
        if best is not None:
            g = _largest(
                0,
                inputs.capacity_floor_gpus,
                lambda g: s.run(dataclasses.replace(inputs, capacity_floor_gpus=g)).score >= best.score,
            )
            fixes.append(
                f"lower the capacity floor from {inputs.capacity_floor_gpus:,} to {g:,} GPUs: {_achieves(s.current, best)}"
            )
    return fixes


def _job_fix(s: _Search) -> list[str]:
    inputs, ctx = s.inputs, s.ctx
    if inputs.largest_job_gpus <= 0 or ctx.job_perf <= 0:
        return []
    per_h100 = ctx.job_perf / inputs.largest_job_gpus

    def job(j: int) -> PlanInputs:
        return dataclasses.replace(inputs, largest_job_gpus=j, largest_job_perf=j * per_h100)

    best = s.better(job(0))
    if best is None:
        return []
    j = _largest(0, inputs.largest_job_gpus, lambda j: s.run(job(j)).score >= best.score)
    target = inputs.target
    return [
        f"lower the largest job from {inputs.largest_job_gpus:,} to {j:,} H100s (one generation's pool must hold "
        f"it: {math.ceil(j * per_h100 / target.perf_per_gpu - 1e-9):,} {target.name} GPUs at "
        f"{target.perf_per_gpu:g} per GPU): {_achieves(s.current, best)}"
    ]


def plan_fixes(
    ctx: PlanContext, run: Run, timeline: Timeline, progress: Callable[[float], None] | None = None
) -> list[str]:
    """Concrete changes to the inputs, each computed exactly, that would remove each reason for infeasibility."""
    if core_feasible(ctx, run, timeline):
        return []
    inputs = ctx.inputs
    target = inputs.target
    H = ctx.horizon
    fixes: list[str] = []
    first = timeline.points[0]
    unit = ctx.perf_unit
    # What the start already breaks: exact from the inputs.
    for hall in inputs.halls:
        initial = sum(r.power_kw for r in (*run.old, *run.kept) if r.position.hall_id == hall.id)
        if initial > ctx.usable_kw[hall.id] + EPS:
            raise_by = math.ceil(initial / (1 - inputs.power_margin) - hall.it_power_budget_kw - 1e-9)
            fixes.append(
                f"raise hall {hall.id} budget by {raise_by:,} kW: the current fleet draws {kw_text(initial)} kW against "
                f"{kw_text(ctx.usable_kw[hall.id])} kW usable ({inputs.power_margin:.0%} power margin kept)"
            )
    if first.total_gpus < ctx.floor_gpus:
        fixes.append(
            f"lower the capacity floor to {first.total_gpus:,} GPUs: the fleet has only {first.total_gpus:,} at the start"
        )
    if not ctx.stepped_floor and ctx.floor_perf is not None and first.perf_total < ctx.floor_perf - 1e-6:
        fixes.append(
            f"lower the capacity floor to {math.floor(first.perf_total):,} {unit}: the fleet has only "
            f"{first.perf_total:,.1f} at the start"
        )
    if first.largest_pool_perf < ctx.job_perf - 1e-6:
        per_h100 = ctx.job_perf / max(1, inputs.largest_job_gpus)
        fixes.append(
            f"lower the largest job to {math.floor(first.largest_pool_perf / per_h100 + 1e-9):,} H100s: no generation "
            f"pool holds {inputs.largest_job_gpus:,} at the start"
        )
    if fixes:
        return fixes
    current = Outcome(
        False,
        sum(1 for r in run.new if r.land_week is None),
        sum(1 for r in run.new if r.land_week is not None and r.land_week + ctx.service_weeks >= H),
        sum(1 for r in run.old if r.drain_week is None),
        0,
    )
    search = _Search(ctx, current)
    steps: list[Callable[[_Search], list[str]]] = [
        _budget_fixes,
        _cooling_fixes,
        _upgrade_fixes,
        _racks_fix,
        _floor_fixes,
        _job_fix,
        _horizon_fix,
    ]
    for i, step in enumerate(steps):
        if progress is not None:
            progress(i / len(steps))
        fixes.extend(step(search))
    unlanded = [r for r in run.new if r.land_week is None]
    if unlanded:
        eligible = [p for p in inputs.positions if ctx.eligible_week[p.id] is not None]
        kept_positions = {r.position.id for r in run.kept}
        in_horizon = [p for p in eligible if (ctx.eligible_week[p.id] or 0) < H and p.id not in kept_positions]
        due = sum(1 for r in run.new if r.due_week < H)
        short = due - len(in_horizon)
        spec_need = f"{kw_text(target.rack_power_kw(target.nodes_per_rack))} kW {target.cooling}"
        if short > 0:
            fixes.append(
                f"add {short} positions that can take {target.name} ({spec_need}), with the hall power and cooling "
                f"to carry them: only {len(in_horizon)} positions can take it within the horizon for {due} racks delivered in it"
            )
        if not fixes:
            facility = sum(1 for r in unlanded if r.waits.get(WAIT_FACILITY))
            fixes.append(
                f"{len(unlanded)} {target.name} racks cannot land ({facility} wait on the facility): add positions for "
                f"{target.name} ({spec_need})"
            )
    if not fixes:
        remaining = [r for r in run.old if r.drain_week is None]
        fixes.append(
            f"{len(remaining)} old racks ({sum(r.gpus for r in remaining):,} GPUs) stay in service against the floor of "
            f"{floor_text(ctx)}: deliver more {target.name} racks or lower the floor"
        )
    if progress is not None:
        progress(1.0)
    return fixes
