"""Plotly figures for a ``MigrationPlanResult``: pure functions from a plan to a ``go.Figure``.

They read only the plan's weekly timelines, so the console, a report and the
tests draw the same thing. Naive sequences are dashed so the trough the plan
avoids stands out against the floor line.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import plotly.graph_objects as go

from planning.engines.migration.results import MigrationPlanResult, Timeline, TimelinePoint


def _dates(timeline: Timeline) -> list[str]:
    return [p.date.isoformat() for p in timeline.points]


def _capacity(
    plan: MigrationPlanResult,
    value: Callable[[TimelinePoint], float],
    per_generation: Callable[[TimelinePoint], Mapping[str, float]],
    unit: str,
    floor: float | None,
) -> go.Figure:
    x = _dates(plan.timeline)
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=x, y=[value(p) for p in plan.timeline.points], name="plan: total", mode="lines"))
    generations = sorted(per_generation(plan.timeline.points[0]))
    for gen in generations:
        fig.add_trace(
            go.Scatter(x=x, y=[per_generation(p)[gen] for p in plan.timeline.points], name=f"plan: {gen}", mode="lines")
        )
    if unit == "GPUs":
        fig.add_trace(
            go.Scatter(
                x=x,
                y=[p.largest_pool_gpus for p in plan.timeline.points],
                name="plan: largest single-generation pool",
                mode="lines",
                line={"dash": "dot"},
            )
        )
    for naive in plan.naive:
        fig.add_trace(
            go.Scatter(
                x=_dates(naive.timeline),
                y=[value(p) for p in naive.timeline.points],
                name=f"naive {naive.name}: total"
                + (
                    f" ({naive.trough_gpu_days:,} GPU-days below floor)"
                    if unit == "GPUs" and floor
                    else f" ({naive.trough_perf_days:,.0f} {unit}-days below floor)"
                    if floor
                    else ""
                ),
                mode="lines",
                line={"dash": "dash"},
            )
        )
    if floor is not None:
        fig.add_hline(y=floor, line={"color": "red"}, annotation_text=f"floor {floor:g} {unit}", name="floor")
    fig.update_layout(
        title=f"Capacity ({unit})",
        xaxis_title="week",
        yaxis_title=unit,
        legend={"orientation": "h", "y": -0.25},
        margin={"t": 40},
    )
    return fig


def capacity_gpus_figure(plan: MigrationPlanResult, floor_gpus: int) -> go.Figure:
    """Raw GPUs over time: total, per generation, largest pool, naive totals, and the floor."""

    def value(p: TimelinePoint) -> float:
        return p.total_gpus

    def per_generation(p: TimelinePoint) -> Mapping[str, float]:
        return p.gpus_by_generation

    return _capacity(plan, value, per_generation, "GPUs", floor_gpus)


def capacity_perf_figure(plan: MigrationPlanResult, floor_perf: float | None = None) -> go.Figure:
    """H100-equivalents over time (GPUs x perf_per_gpu for the plan's workload); floor drawn when one is given."""

    def value(p: TimelinePoint) -> float:
        return p.perf_total

    def per_generation(p: TimelinePoint) -> Mapping[str, float]:
        return p.perf_by_generation

    return _capacity(plan, value, per_generation, plan.perf_unit, floor_perf)


def power_figure(plan: MigrationPlanResult) -> go.Figure:
    """IT power per hall and in total against the budgets, plus facility power (IT x PUE)."""
    points = plan.timeline.points
    x = _dates(plan.timeline)
    fig = go.Figure()
    for hall in sorted(points[0].power_kw_by_hall):
        fig.add_trace(go.Scatter(x=x, y=[p.power_kw_by_hall[hall] for p in points], name=f"IT kW {hall}", mode="lines"))
        fig.add_trace(
            go.Scatter(
                x=x,
                y=[p.budget_kw_by_hall[hall] for p in points],
                name=f"budget kW {hall}",
                mode="lines",
                line={"dash": "dash"},
            )
        )
    fig.add_trace(go.Scatter(x=x, y=[p.power_kw_total for p in points], name="IT kW total", mode="lines"))
    fig.add_trace(
        go.Scatter(
            x=x, y=[p.budget_kw_total for p in points], name="budget kW total", mode="lines", line={"dash": "dash"}
        )
    )
    fig.add_trace(go.Scatter(x=x, y=[p.facility_power_kw for p in points], name="facility kW (IT x PUE)", mode="lines"))
    fig.update_layout(
        title="Power", xaxis_title="week", yaxis_title="kW", legend={"orientation": "h", "y": -0.25}, margin={"t": 40}
    )
    return fig


# ---- capacity plans (from the stored result: plain JSON)


def capacity_need_figure(result: Mapping) -> go.Figure:
    """GPUs needed per month for each generation sized, with today's GPUs of the target generation."""
    months = [m["month"] for m in result["months"]]
    fig = go.Figure()
    generations = sorted({n["gpu_model"] for m in result["months"] for n in m["needs"]})
    for gpu_model in generations:
        y = [next((n["gpus"] for n in m["needs"] if n["gpu_model"] == gpu_model), None) for m in result["months"]]
        fig.add_trace(go.Bar(x=months, y=y, name=f"{gpu_model}: GPUs needed"))
    fig.add_trace(
        go.Scatter(
            x=months,
            y=[g["current_gpus"] for g in result["gap"]],
            mode="lines",
            name=f"{result['target_gpu_model']}: GPUs today",
            line={"dash": "dash"},
        )
    )
    fig.update_layout(
        title="GPUs needed per month",
        xaxis_title="month",
        yaxis_title="GPUs",
        barmode="group",
        legend={"orientation": "h", "y": -0.25},
        margin={"t": 40},
    )
    return fig


def capacity_power_figure(result: Mapping) -> go.Figure:
    """IT kW of the racks each generation would need, per month."""
    months = [m["month"] for m in result["months"]]
    fig = go.Figure()
    generations = sorted({n["gpu_model"] for m in result["months"] for n in m["needs"]})
    for gpu_model in generations:
        y = [next((n["kw"] for n in m["needs"] if n["gpu_model"] == gpu_model), None) for m in result["months"]]
        fig.add_trace(go.Scatter(x=months, y=y, mode="lines+markers", name=f"{gpu_model}: rack kW"))
    fig.update_layout(
        title="Rack power needed per month",
        xaxis_title="month",
        yaxis_title="kW",
        legend={"orientation": "h", "y": -0.25},
        margin={"t": 40},
    )
    return fig
