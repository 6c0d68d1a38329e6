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

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date, timedelta

from planning.engines.migration.context import PlanContext, build_context
from planning.engines.migration.facility import kw_text
from planning.engines.migration.fixes import core_feasible, plan_fixes
from planning.engines.migration.inputs import (
    DECOMMISSION_FIRST,
    EPS,
    ONE_FOR_ONE_SWAP,
    PLAN,
    Delivery,
    FacilityUpgrade,
    FleetBlock,
    Hall,
    NodeTypeSpec,
    PlanInputs,
    Position,
    Workload,
)
from planning.engines.migration.naive import naive_sequence
from planning.engines.migration.results import MigrationPlanResult, Phase, Placement, Timeline, Verdicts
from planning.engines.migration.schedule import (
    Run,
    build_phases,
    build_timeline,
    drain_items,
    old_racks_of,
    simulate,
)


def shared_fabric_peak(ctx: PlanContext, run: Run) -> tuple[int, int, int, int]:
    """(peak endpoints, its week, old GPUs, new GPUs then) cabled to the fabric the target shares with
    the old fleet: every old node in service, draining, sanitising or waiting to ship, every kept
    node, and every new node from landing (burn-in runs on the fabric)."""
    H = ctx.horizon
    S = ctx.space_release_weeks
    fabric = ctx.inputs.target.fabric
    old_d = [0] * (H + 1)
    new_d = [0] * (H + 1)
    for rack in (*run.old, *run.kept):
        if rack.block.node_type.fabric != fabric:
            continue
        end = H if rack.drain_week is None else min(H, rack.drain_week + S)
        old_d[0] += rack.gpus
        old_d[end] -= rack.gpus
    for rack in run.new:
        if rack.land_week is not None and rack.land_week < H:
            new_d[rack.land_week] += rack.nodes * ctx.inputs.target.gpus_per_node
    best = (0, 0, 0, 0)
    old_now = new_now = 0
    for t in range(H):
        old_now += old_d[t]
        new_now += new_d[t]
        if old_now + new_now > best[0]:
            best = (old_now + new_now, t, old_now, new_now)
    return best


def fabric_notes_for(ctx: PlanContext, run: Run, timeline: Timeline) -> tuple[str, ...]:
    inputs = ctx.inputs
    target = inputs.target
    notes: list[str] = []
    for fabric in sorted({b.node_type.fabric for b in inputs.fleet}):
        old_gens = sorted({b.node_type.generation for b in inputs.fleet if b.node_type.fabric == fabric})
        if fabric != target.fabric:
            notes.append(
                f"{target.name} uses {target.fabric}, the {'/'.join(old_gens)} fleet uses {fabric}: "
                f"it needs its own fabric, so the pools are separate"
            )
            continue
        peak, week, old_part, new_part = shared_fabric_peak(ctx, run)
        cabled = (
            f"{peak:,} endpoints cabled in the week of {ctx.date_of(week)} ({old_part:,} "
            f"{'/'.join(old_gens)} GPUs in service, draining, sanitising or awaiting shipping + {new_part:,} "
            f"{target.name} GPUs in burn-in or service)"
        )
        if ctx.fabric_limit is not None and peak > ctx.fabric_limit:
            notes.append(
                f"{target.name} speaks {fabric} like the {'/'.join(old_gens)} fleet, but {cabled} exceed the "
                f"fabric's {ctx.fabric_limit:,} ({ctx.fabric_source}): it needs its own fabric (or a third tier), "
                "so the pools are separate"
            )
        else:
            limit = f" of {ctx.fabric_limit:,}" if ctx.fabric_limit is not None else ""
            notes.append(f"{target.name} can join the existing {fabric} fabric{limit}: {cabled}")
    gens = sorted(timeline.points[0].gpus_by_generation)
    pools = ", ".join(f"{g} up to {max(p.gpus_by_generation[g] for p in timeline.points):,} GPUs" for g in gens)
    notes.append(f"jobs never span generations; largest pool per generation: {pools}")
    if target.rack_scale:
        notes.append(f"{target.name}: NVLink domain of {target.gpus_per_rack} GPUs per rack")
    return tuple(notes)


def binding_constraints(ctx: PlanContext, run: Run, fixes: list[str], fabric_notes: tuple[str, ...]) -> tuple[str, ...]:
    """Every constraint that shaped the plan: what delivered racks waited for (racks and rack-weeks),
    what held drains back, what the fabric could not take, and every reason it is infeasible."""
    out: list[str] = []
    waited: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for rack in run.new:
        for reason, weeks in rack.waits.items():
            waited[reason][0] += 1
            waited[reason][1] += weeks
    for reason, (racks, weeks) in sorted(waited.items(), key=lambda kv: -kv[1][1]):
        out.append(f"{reason}: {racks:,} delivered racks waited {weeks:,} rack-weeks in all")
    if run.floor_blocked:
        out.append(f"the floors and the largest job held back drains a delivery needed in {run.floor_blocked:,} weeks")
    remaining = [r for r in run.old if r.drain_week is None]
    if remaining:
        out.append(f"{len(remaining):,} old racks ({sum(r.gpus for r in remaining):,} GPUs) are never drained")
    out.extend(n for n in fabric_notes if "exceed" in n)
    out.extend(f"infeasible: {f}" for f in fixes)
    return tuple(out)


def _stage(progress: Callable[[float], None] | None, start: float, end: float) -> Callable[[float], None] | None:
    """A stage's own 0..1 progress mapped onto [start, end] of the whole plan's."""
    if progress is None:
        return None
    report = progress
    return lambda fraction: report(start + (end - start) * fraction)


def plan_migration(inputs: PlanInputs, progress: Callable[[float], None] | None = None) -> MigrationPlanResult:
    """Plan moving ``inputs.fleet`` onto ``inputs.target``; pure and deterministic.

    ``progress``, when given, is called with the fraction done (0..1, rising): the plan's own
    replay is the first half, each naive sequence a fifth, and 1.0 once the result is built.
    It only observes; the answer is the same with or without it."""
    ctx = build_context(inputs)
    run = simulate(ctx, PLAN, _stage(progress, 0.0, 0.5))
    timeline = build_timeline(ctx, run)
    naive = (
        naive_sequence(ctx, DECOMMISSION_FIRST, _stage(progress, 0.5, 0.65)),
        naive_sequence(ctx, ONE_FOR_ONE_SWAP, _stage(progress, 0.65, 0.8)),
    )
    fixes = plan_fixes(ctx, run, timeline, _stage(progress, 0.8, 0.95))
    phases = build_phases(ctx, run, with_prep=True)
    low = timeline.min_capacity()
    trough_perf = timeline.trough_perf_days()
    floor_held = all(p.total_gpus >= ctx.floor_gpus for p in timeline.points) and trough_perf == 0
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
        largest_job_runnable_always=timeline.largest_job_runnable_always(ctx.job_perf),
        trough_gpu_days=timeline.trough_gpu_days(ctx.floor_gpus),
        naive_trough_gpu_days={n.name: n.trough_gpu_days for n in naive},
        trough_perf_days=trough_perf,
        naive_trough_perf_days={n.name: n.trough_perf_days for n in naive},
        old_fleet_retired=all(r.drain_week is not None for r in run.old),
        given_up_perf_days=timeline.given_up_perf_days(),
        need_met_always=timeline.need_shortfall_perf_days() == 0,
        need_shortfall_perf_days=timeline.need_shortfall_perf_days(),
        peak_cabled_gpus=max((p.cabled_gpus for p in timeline.points), default=0),
    )
    feasible = core_feasible(ctx, run, timeline)
    notes = []
    for rack in run.new:
        if rack.land_week is not None and rack.land_week > rack.due_week:
            notes.append(
                f"rack {rack.id} (delivery {rack.delivery.date}) waited {rack.land_week - rack.due_week} weeks: "
                f"{rack.wait_reason}"
            )
    if not verdicts.need_met_always:
        short = next(
            p
            for p in timeline.points
            if p.floor_perf is not None and p.perf_total + p.drained_perf < p.floor_perf - 1e-6
        )
        notes.append(
            f"the floor of {short.floor_perf:,.0f} {ctx.perf_unit} in force from {short.date} is more than the fleet "
            f"has in service even without drains ({short.perf_total + short.drained_perf:,.0f}): deliveries arrive "
            f"too late for it ({verdicts.need_shortfall_perf_days:,.0f} {ctx.perf_unit}-days short in all); this "
            "is the forecast's gap, not the migration's"
        )
    if run.kept:
        notes.append(
            f"{len(run.kept)} racks already hold {target_name(inputs)}: they stay, occupy their positions, draw "
            f"{kw_text(sum(r.power_kw for r in run.kept))} kW and count {sum(r.gpus for r in run.kept):,} GPUs"
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
    fabric_notes = fabric_notes_for(ctx, run, timeline)
    complete = None
    if feasible:
        weeks = [r.land_week + ctx.service_weeks for r in run.new if r.land_week is not None]
        weeks += [r.drain_week for r in run.old if r.drain_week is not None]
        complete = ctx.date_of(max(weeks, default=0))
    if progress is not None:
        progress(1.0)
    return MigrationPlanResult(
        feasible=feasible,
        fixes=tuple(fixes),
        verdicts=verdicts,
        position_verdicts=ctx.verdicts,
        phases=phases,
        placements=placements,
        timeline=timeline,
        naive=naive,
        fabric_notes=fabric_notes,
        notes=tuple(notes),
        assumptions=ctx.assumptions,
        finish=max((p.end for p in phases), default=None) if feasible else None,
        floor_gpus=ctx.floor_gpus,
        floor_perf=ctx.floor_perf,
        perf_unit=ctx.perf_unit,
        drains=drain_items(ctx, run),
        binding_constraints=binding_constraints(ctx, run, fixes, fabric_notes),
        largest_job_perf=ctx.job_perf,
        complete=complete,
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
        return next((d for d, kw in zip(self.dates, self.reused_kw) if kw > EPS), None)

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


def power_reuse(
    inputs: PlanInputs, phases: Sequence[Phase], placements: Sequence[Placement], weeks: Sequence[date]
) -> PowerReuse:
    """What a plan frees and reuses week by week, from its phases, placements and timeline weeks (pure).

    Takes the plan's parts rather than the whole result so a stored plan's own schedule can be
    read back (``planning.plan_json``) without running the planner again."""
    ctx = build_context(inputs)
    positions = {p.id: p for p in inputs.positions}
    old_kw = {r.position.id: r.power_kw for r in old_racks_of(inputs.fleet, positions)}
    initial = defaultdict(float)
    for r in (*old_racks_of(inputs.fleet, positions), *old_racks_of(inputs.kept, positions)):
        initial[r.position.hall_id] += r.power_kw
    spare = {h: max(0.0, ctx.usable_kw[h] - initial[h]) for h in ctx.halls}
    released: list[tuple[date, str, float]] = []
    for phase in phases:
        if phase.kind == "sanitise":
            for pid in phase.position_ids:
                released.append((phase.end, positions[pid].hall_id, old_kw.get(pid, 0.0)))
    landed = [(pl.land, pl.hall_id, inputs.target.rack_power_kw(pl.nodes)) for pl in placements]
    dates, freed_series, reused_series = [], [], []
    for day in weeks:
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
