"""The naive sequences the plan is compared with (decommission first, one-for-one swap),
replayed on the same inputs and measured against the same floors."""

from __future__ import annotations

from collections.abc import Callable

from planning.engines.migration.context import PlanContext
from planning.engines.migration.inputs import DECOMMISSION_FIRST
from planning.engines.migration.results import NaiveSequence
from planning.engines.migration.schedule import build_phases, build_timeline, simulate


def floor_text(ctx: PlanContext) -> str:
    parts = []
    if ctx.floor_perf is not None:
        parts.append(f"{ctx.floor_perf:,.0f} {ctx.perf_unit}")
    if ctx.floor_gpus or ctx.floor_perf is None:
        parts.append(f"{ctx.floor_gpus:,} GPUs")
    return " and ".join(parts)


def naive_sequence(ctx: PlanContext, name: str, progress: Callable[[float], None] | None = None) -> NaiveSequence:
    inputs = ctx.inputs
    run = simulate(ctx, name, progress)
    timeline = build_timeline(ctx, run)
    low = timeline.min_capacity()
    trough = timeline.trough_gpu_days(ctx.floor_gpus)
    trough_perf = timeline.trough_perf_days()
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
        first_ok = timeline.first_week_holding(ctx.floor_gpus)
        if (trough or trough_perf) and first_ok is not None:
            weeks = (first_ok.date - inputs.start).days // 7
            notes.append(
                f"delay draining the old fleet by {weeks} weeks (to {first_ok.date}) to hold the floor of "
                f"{floor_text(ctx)}"
            )
    return NaiveSequence(
        name=name,
        timeline=timeline,
        phases=build_phases(ctx, run, with_prep=True),
        trough_gpu_days=trough,
        min_capacity_gpus=low.total_gpus,
        min_capacity_date=low.date,
        largest_job_runnable_always=timeline.largest_job_runnable_always(ctx.job_perf),
        stranded_racks=stranded,
        notes=tuple(notes),
        trough_perf_days=trough_perf,
        min_capacity_perf=round(low_perf, 6),
        given_up_perf_days=timeline.given_up_perf_days(),
    )
