"""Plotly figures of a twin report: pure functions from the report's dict to figures, each
saying so when it has nothing to draw (core.charts)."""

import plotly.graph_objects as go

from core.charts import say_when_empty

NO_RUN = "No twin run yet: run manage.py twin"
_LAYOUT = {"height": 320, "margin": {"t": 40, "b": 40, "l": 60, "r": 10}}


def _months(variant: dict) -> list[str]:
    return [f"month {m + 1}" for m in range(len(variant.get("goodput_by_month") or []))]


def goodput_figure(report: dict | None) -> go.Figure:
    fig = go.Figure()
    for v in (report or {}).get("variants", []):
        fig.add_trace(
            go.Scatter(x=_months(v), y=[g * 100 for g in v["goodput_by_month"]], mode="lines+markers", name=v["name"])
        )
    fig.update_layout(title="Goodput by month (modelled)", yaxis_title="% of allocated GPU-time", **_LAYOUT)
    return say_when_empty(fig, NO_RUN if report is None else "No allocated GPU-time in this run")


def causes_figure(report: dict | None) -> go.Figure:
    variants = (report or {}).get("variants", [])
    causes = sorted({c for v in variants for c in v.get("interruptions_by_cause", {})})
    fig = go.Figure()
    for v in variants:
        fig.add_trace(go.Bar(x=causes, y=[v["interruptions_by_cause"].get(c, 0) for c in causes], name=v["name"]))
    fig.update_layout(barmode="group", title="Job interruptions by cause", yaxis_title="interruptions", **_LAYOUT)
    return say_when_empty(fig, NO_RUN if report is None else "No interruptions in this run")


def spares_figure(report: dict | None) -> go.Figure:
    fig = go.Figure()
    for v in (report or {}).get("variants", []):
        fig.add_trace(go.Bar(x=_months(v), y=v["spares_used_by_month"], name=v["name"]))
    fig.update_layout(barmode="group", title="Nodes out of service at the month's peak", yaxis_title="nodes", **_LAYOUT)
    return say_when_empty(fig, NO_RUN if report is None else "No node was out of service in this run")


def credits_figure(report: dict | None) -> go.Figure:
    fig = go.Figure()
    for v in (report or {}).get("variants", []):
        fig.add_trace(go.Bar(x=_months(v), y=[float(c) for c in v["credits_by_month"]], name=v["name"]))
    fig.update_layout(barmode="group", title="SLA credits by month (estimated)", yaxis_title="USD", **_LAYOUT)
    return say_when_empty(fig, NO_RUN if report is None else "No SLA credits in this run")
