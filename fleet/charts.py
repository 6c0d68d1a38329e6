"""Dashboard figures: pure functions from selector output to a plotly ``go.Figure``.

Pages embed ``figure_json(fig)``; the refresh endpoints answer the same JSON, so what a page
draws first and what it redraws every few seconds come from one function.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

import plotly.graph_objects as go
import plotly.io as pio

from core.charts import say_when_empty

from .choices import LIFECYCLE_COLORS, Lifecycle

FONT = {"family": "system-ui, -apple-system, Segoe UI, Roboto, sans-serif", "size": 13, "color": "#1f2933"}
HOT_LINE_PCT = 90  # racks at or above this share of usable kW are highlighted
COLORS = {
    "budget": "#9aa5b1",
    "drawn": "#2680c2",
    "facility": "#e67635",
    "fleet": "#102a43",
    "hot": "#d64545",
    "ok": "#3ebd93",
}
GENERATION_COLORS = ("#2680c2", "#3ebd93", "#e67635", "#7b61ff", "#f0b429", "#d64545")
# plotly_white as these charts use it: its layout and its bar and line defaults, built once.
# Naming "plotly_white" on each figure deep-copied the whole template, defaults for two dozen
# trace kinds, every time (21 ms a figure against 8 ms) and put all of it in the page's JSON.
_WHITE = pio.templates["plotly_white"]
TEMPLATE = go.layout.Template(layout=_WHITE.layout, data={"bar": _WHITE.data.bar, "scatter": _WHITE.data.scatter})


def _layout(fig: go.Figure, *, title: str, height: int = 320, **extra) -> go.Figure:
    fig.update_layout(
        title={"text": title, "x": 0, "xanchor": "left", "font": {"size": 15}},
        template=TEMPLATE,
        font=FONT,
        height=height,
        margin={"l": 60, "r": 20, "t": 48, "b": 48},
        legend={"orientation": "h", "y": -0.18},
        **extra,
    )
    return say_when_empty(fig)


def figure_json(fig: go.Figure) -> str:
    """The figure as JSON safe to place inside a <script> element."""
    return fig.to_json().replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def gpus_by_state(by_state: Sequence[tuple[str, int]]) -> go.Figure:
    """Horizontal bars: GPUs per lifecycle state, in the console's state colours."""
    rows = list(reversed(by_state))  # largest at the top
    labels = [Lifecycle(s).label if s in Lifecycle.values else s for s, _ in rows]
    fig = go.Figure(
        go.Bar(
            x=[n for _, n in rows],
            y=labels,
            orientation="h",
            text=[f"{n:,}" for _, n in rows],
            textposition="auto",
            marker={"color": [LIFECYCLE_COLORS.get(s, "#9aa5b1") for s, _ in rows]},
            hovertemplate="%{y}: %{x:,} GPUs<extra></extra>",
        )
    )
    return _layout(
        fig,
        title="GPUs by lifecycle state",
        height=max(220, 60 + 28 * len(rows)),
        xaxis={"title": "GPUs"},
        showlegend=False,
    )


def utilisation(points: Iterable[dict], *, title: str) -> go.Figure:
    """Allocated share of GPUs over time: one line per generation plus the whole fleet.

    ``points`` are ``{"at", "generation", "allocated", "total"}`` rows as recorded snapshots give them.
    """
    per_generation: dict[str, tuple[list[datetime], list[float]]] = {}
    fleet: dict[datetime, list[int]] = {}
    for p in points:
        xs, ys = per_generation.setdefault(p["generation"], ([], []))
        xs.append(p["at"])
        ys.append(round(100.0 * p["allocated"] / p["total"], 1) if p["total"] else 0.0)
        acc = fleet.setdefault(p["at"], [0, 0])
        acc[0] += p["allocated"]
        acc[1] += p["total"]
    fig = go.Figure()
    times = sorted(fleet)
    fig.add_trace(
        go.Scatter(
            x=times,
            y=[round(100.0 * fleet[t][0] / fleet[t][1], 1) if fleet[t][1] else 0.0 for t in times],
            name="fleet",
            mode="lines",
            line={"color": COLORS["fleet"], "width": 3},
            hovertemplate="%{x|%Y-%m-%d %H:%M} UTC<br>fleet %{y:.1f}%<extra></extra>",
        )
    )
    if len(per_generation) > 1:
        for i, (gen, (xs, ys)) in enumerate(sorted(per_generation.items())):
            fig.add_trace(
                go.Scatter(
                    x=xs,
                    y=ys,
                    name=gen,
                    mode="lines",
                    line={"color": GENERATION_COLORS[i % len(GENERATION_COLORS)], "width": 1.5},
                )
            )
    return _layout(
        fig, title=title, yaxis={"title": "GPUs allocated (%)", "range": [0, 100]}, xaxis={"title": "time (UTC)"}
    )


def hall_power(halls: Sequence) -> go.Figure:
    """Per hall: IT budget, IT draw, and facility draw (IT × PUE), in kW."""
    names = [h.name for h in halls]
    fig = go.Figure(
        [
            go.Bar(name="IT budget", x=names, y=[h.budget_kw for h in halls], marker={"color": COLORS["budget"]}),
            go.Bar(
                name="IT (wall) draw",
                x=names,
                y=[h.drawn_kw for h in halls],
                marker={"color": COLORS["drawn"]},
                text=[f"{h.load_pct:.0f}%" for h in halls],
                textposition="outside",
                customdata=[h.sources.label for h in halls],
                hovertemplate="%{x}: %{y:,.1f} kW (%{customdata})<extra></extra>",
            ),
            go.Bar(
                name="facility draw (× PUE)",
                x=names,
                y=[h.facility_kw for h in halls],
                marker={"color": COLORS["facility"]},
            ),
        ]
    )
    return _layout(fig, title="Hall power: draw against budget", barmode="group", yaxis={"title": "kW"})


def rack_load(loads_pct: Sequence[float]) -> go.Figure:
    """How many racks sit at each share of their usable kW; the 90 % line marks the hot ones."""
    bins = list(range(0, 110, 10))
    counts = [0] * (len(bins))
    for pct in loads_pct:
        counts[min(int(pct // 10), len(bins) - 1)] += 1
    labels = [f"{b}–{b + 10}%" if b < 100 else "≥100%" for b in bins]
    fig = go.Figure(
        go.Bar(
            x=labels,
            y=counts,
            text=counts,
            textposition="outside",
            marker={"color": [COLORS["hot"] if b >= HOT_LINE_PCT else COLORS["ok"] for b in bins]},
            hovertemplate="%{x}: %{y} racks<extra></extra>",
        )
    )
    return _layout(
        fig,
        title="Racks by load (draw ÷ usable kW); red = at or above 90 %",
        xaxis={"title": "load"},
        yaxis={"title": "racks"},
        showlegend=False,
    )


def hall_power_history(points: Iterable[dict], *, title: str) -> go.Figure:
    """Wall (IT) draw per hall over time; each point's hover says how it was known."""
    per_hall: dict[str, tuple[list, list, list]] = {}
    for p in points:
        xs, ys, sources = per_hall.setdefault(p["hall"], ([], [], []))
        xs.append(p["at"])
        ys.append(round(p["kw"], 1))
        sources.append(p["source"])
    fig = go.Figure(
        [
            go.Scatter(
                x=xs,
                y=ys,
                name=hall,
                mode="lines",
                customdata=sources,
                line={"color": GENERATION_COLORS[i % len(GENERATION_COLORS)], "width": 2},
                hovertemplate="%{x|%Y-%m-%d %H:%M} UTC<br>%{y:,.1f} kW (%{customdata})<extra></extra>",
            )
            for i, (hall, (xs, ys, sources)) in enumerate(sorted(per_hall.items()))
        ]
    )
    return _layout(fig, title=title, yaxis={"title": "kW (wall)"}, xaxis={"title": "time (UTC)"})
