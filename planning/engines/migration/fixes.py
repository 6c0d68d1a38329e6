"""What would make an infeasible plan work, in numbers computed from the inputs and in the
floor's unit."""

from __future__ import annotations

import math
from collections import defaultdict
from datetime import date

from planning.engines.migration.context import PlanContext
from planning.engines.migration.facility import heat_split, kw_text
from planning.engines.migration.inputs import EPS
from planning.engines.migration.naive import floor_text
from planning.engines.migration.results import Timeline
from planning.engines.migration.schedule import Run


def more_racks_needed(ctx: PlanContext, short_gpus: int, short_perf: float) -> tuple[int, int]:
    """(GPUs, racks) of the target that cover a shortfall in either unit."""
    target = ctx.inputs.target
    gpus = max(short_gpus, math.ceil(short_perf / target.perf_per_gpu - 1e-9) if short_perf > 0 else 0)
    return gpus, math.ceil(gpus / target.gpus_per_rack)


def plan_fixes(ctx: PlanContext, run: Run, timeline: Timeline) -> list[str]:
    """Concrete changes to the inputs, in the floor's unit, that would remove each reason for infeasibility."""
    inputs = ctx.inputs
    target = inputs.target
    H = ctx.horizon
    fixes: list[str] = []
    first = timeline.points[0]
    unit = ctx.perf_unit
    for hall in inputs.halls:
        initial = sum(r.power_kw for r in (*run.old, *run.kept) if r.position.hall_id == hall.id)
        if initial > ctx.usable_kw[hall.id] + EPS:
            raise_by = math.ceil(initial / (1 - inputs.power_margin) - hall.it_power_budget_kw)
            fixes.append(
                f"raise hall {hall.id} budget by {raise_by} kW: the current fleet draws {kw_text(initial)} kW "
                f"against {kw_text(ctx.usable_kw[hall.id])} kW usable"
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
    spec_need = f"{kw_text(target.rack_power_kw(target.nodes_per_rack))} kW {target.cooling}"
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
            if need > EPS:
                fixes.append(
                    f"raise hall {hall_id} budget by {math.ceil(need / (1 - inputs.power_margin))} kW "
                    f"so {n} more {target.name} racks fit"
                )
            cap = ctx.halls[hall_id].cdu_usable_kw
            lq, _ = heat_split(target, unlanded[0].power_kw, ctx.facility)
            if cap is not None and lq > 0:
                need_lq = max(run.liquid[hall_id][due:] or [0.0]) + n * lq - cap
                unit_kw = ctx.halls[hall_id].cdu_unit_kw or 0
                if need_lq > EPS and unit_kw > 0:
                    fixes.append(
                        f"add {math.ceil(need_lq / unit_kw)} CDU units of {kw_text(unit_kw)} kW in hall {hall_id} "
                        f"so {n} more {target.name} racks fit ({kw_text(need_lq)} kW of liquid heat over the N+1 capacity)"
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
            gpus, racks = more_racks_needed(ctx, short_gpus, short_perf)
            have = f"{new_perf:,.1f} {unit}" if short_perf > 1e-6 else f"{new_gpus:,} GPUs"
            fixes.append(
                f"deliver {racks} more {target.name} racks ({gpus:,} GPUs), or lower the floor to {have}: the new "
                f"fleet of {have} cannot hold the floor of {floor_text(ctx)} alone, so {old_left:,} old GPUs "
                f"cannot be retired"
            )
        elif pool < inputs.largest_job_gpus:
            gpus, racks = more_racks_needed(ctx, inputs.largest_job_gpus - pool, 0.0)
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
