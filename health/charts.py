"""Plotly figures for the health dashboard: pure functions from selector rows to figures."""

import plotly.graph_objects as go

from core.charts import say_when_empty
from fleet.choices import HEALTH_COLORS, LIFECYCLE_COLORS


def health_by_hall_figure(rows: list[dict]) -> go.Figure:
    """Stacked bars: nodes per hall by health."""
    halls = sorted({r["hall"] for r in rows})
    fig = go.Figure()
    for health, color in HEALTH_COLORS.items():
        values = [sum(r["n"] for r in rows if r["hall"] == hall and r["health"] == health) for hall in halls]
        fig.add_trace(go.Bar(x=halls, y=values, name=str(health.label), marker_color=color))
    fig.update_layout(
        barmode="stack",
        title="Nodes by health per hall",
        yaxis_title="nodes",
        height=320,
        margin={"t": 40, "b": 40, "l": 50, "r": 10},
    )
    return say_when_empty(fig)


def lifecycle_by_hall_figure(rows: list[dict]) -> go.Figure:
    halls = sorted({r["hall"] for r in rows})
    states = sorted({r["lifecycle"] for r in rows})
    fig = go.Figure()
    for state in states:
        values = [sum(r["n"] for r in rows if r["hall"] == hall and r["lifecycle"] == state) for hall in halls]
        fig.add_trace(go.Bar(x=halls, y=values, name=state, marker_color=LIFECYCLE_COLORS.get(state)))
    fig.update_layout(
        barmode="stack",
        title="Nodes by lifecycle per hall",
        yaxis_title="nodes",
        height=320,
        margin={"t": 40, "b": 40, "l": 50, "r": 10},
    )
    return say_when_empty(fig)


def failure_causes_figure(rows: list[dict]) -> go.Figure:
    """Incidents per day stacked by the signal that opened them."""
    days = sorted({r["day"] for r in rows})
    fig = go.Figure()
    for signal in sorted({r["signal"] for r in rows}):
        values = [sum(r["n"] for r in rows if r["day"] == day and r["signal"] == signal) for day in days]
        fig.add_trace(go.Bar(x=days, y=values, name=signal))
    fig.update_layout(
        barmode="stack",
        title="Failure causes over time (incidents per day)",
        yaxis_title="incidents",
        height=320,
        margin={"t": 40, "b": 40, "l": 50, "r": 10},
    )
    return say_when_empty(fig)
