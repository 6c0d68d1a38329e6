"""Plotly figures of stored plans: pure functions from a plan's stored result (plain JSON) to a
``go.Figure``, drawn at render time.

Migration figures read only the stored weekly timelines (``planning.plan_json.plan_to_json``), so
the console, a report and the tests draw the same thing without running the planner again.
Naive sequences are dashed so the trough the plan avoids stands out against the floor line. A
plan without weeks draws a figure that says so.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import plotly.graph_objects as go

Point = Mapping


def _empty(title: str, message: str) -> go.Figure:
    figure = go.Figure()
    figure.add_annotation(text=message, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    figure.update_layout(title=title, xaxis={"visible": False}, yaxis={"visible": False})
    return figure


def _points(timeline: Mapping) -> list[Point]:
    return list(timeline.get("points") or [])


def _dates(timeline: Mapping) -> list[str]:
    return [p["date"] for p in _points(timeline)]


def _capacity(
    result: Mapping,
    value: Callable[[Point], float],
    per_generation: Callable[[Point], Mapping[str, float]],
    unit: str,
    floor: float | None,
) -> go.Figure:
    points = _points(result["timeline"])
    if not points:
        return _empty(f"Capacity ({unit})", "This plan has no weeks to draw.")
    x = _dates(result["timeline"])
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=x, y=[value(p) for p in points], name="plan: total", mode="lines"))
    for gen in sorted(per_generation(points[0])):
        fig.add_trace(go.Scatter(x=x, y=[per_generation(p)[gen] for p in points], name=f"plan: {gen}", mode="lines"))
    if unit == "GPUs":
        fig.add_trace(
            go.Scatter(
                x=x,
                y=[p["largest_pool_gpus"] for p in points],
                name="plan: largest single-generation pool",
                mode="lines",
                line={"dash": "dot"},
            )
        )
    for naive in result.get("naive", []):
        if unit == "GPUs" and floor:
            below = f" ({naive['trough_gpu_days']:,} GPU-days below floor)"
        elif floor:
            below = f" ({naive.get('trough_perf_days', 0.0):,.0f} {unit}-days below floor)"
        else:
            below = ""
        fig.add_trace(
            go.Scatter(
                x=_dates(naive["timeline"]),
                y=[value(p) for p in _points(naive["timeline"])],
                name=f"naive {naive['name']}: total{below}",
                mode="lines",
                line={"dash": "dash"},
            )
        )
    stepped = [p.get("floor_perf") for p in points] if unit != "GPUs" else []
    if floor is None and any(v is not None for v in stepped) and len(set(stepped)) > 1:
        # A floor from a forecast changes month by month: draw it week by week.
        fig.add_trace(
            go.Scatter(x=x, y=stepped, name="floor (the forecast's need)", mode="lines", line={"color": "red"})
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


def capacity_gpus_figure(result: Mapping, floor_gpus: int) -> go.Figure:
    """Raw GPUs over time: total, per generation, largest pool, naive totals, and the floor."""
    return _capacity(result, lambda p: p["total_gpus"], lambda p: p["gpus_by_generation"], "GPUs", floor_gpus)


def capacity_perf_figure(result: Mapping, floor_perf: float | None = None) -> go.Figure:
    """H100-equivalents over time (GPUs x perf_per_gpu for the plan's workload); floor drawn when one is given."""
    unit = result.get("perf_unit") or "H100-equivalent"
    return _capacity(result, lambda p: p["perf_total"], lambda p: p["perf_by_generation"], unit, floor_perf)


def power_figure(result: Mapping) -> go.Figure:
    """IT power per hall and in total against the budgets, plus facility power (IT x PUE)."""
    points = _points(result["timeline"])
    if not points:
        return _empty("Power", "This plan has no weeks to draw.")
    x = _dates(result["timeline"])
    fig = go.Figure()
    for hall in sorted(points[0]["power_kw_by_hall"]):
        fig.add_trace(
            go.Scatter(x=x, y=[p["power_kw_by_hall"][hall] for p in points], name=f"IT kW {hall}", mode="lines")
        )
        fig.add_trace(
            go.Scatter(
                x=x,
                y=[p["budget_kw_by_hall"][hall] for p in points],
                name=f"budget kW {hall}",
                mode="lines",
                line={"dash": "dash"},
            )
        )
    fig.add_trace(go.Scatter(x=x, y=[p["power_kw_total"] for p in points], name="IT kW total", mode="lines"))
    fig.add_trace(
        go.Scatter(
            x=x, y=[p["budget_kw_total"] for p in points], name="budget kW total", mode="lines", line={"dash": "dash"}
        )
    )
    fig.add_trace(
        go.Scatter(x=x, y=[p["facility_power_kw"] for p in points], name="facility kW (IT x PUE)", mode="lines")
    )
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
