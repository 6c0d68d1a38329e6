"""Plotly figures for the disposition console, drawn at render time from a stored plan's result.

Pure functions of the result's data (the JSON ``create_disposition_plan`` stores: per option the
node counts and totals, per block each option's cash and freed-power value, already rounded to
cents), so the stored plan holds numbers, never a drawing, and the figures are tested as data.
An empty plan draws a figure that says so instead of blank axes.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal

import plotly.graph_objects as go

from planning.engines.disposition.types import OPTION_ORDER

# The options a block is valued for outside the business, in tie-break order (redeploy is per pool).
OUTSIDE_OPTIONS = tuple(o.value for o in OPTION_ORDER if o.value != "redeploy")


def _empty(title: str, message: str) -> go.Figure:
    figure = go.Figure()
    figure.add_annotation(text=message, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    figure.update_layout(title=title, xaxis={"visible": False}, yaxis={"visible": False})
    return figure


def best_redeploy(block: Mapping) -> tuple[str, Mapping] | None:
    """The pool whose redeploy returns most per node (the first such pool on a tie), or None."""
    best = None
    for pool, value in block.get("redeploy", {}).items():
        if best is None or Decimal(value["return_per_node"]) > Decimal(best[1]["return_per_node"]):
            best = (pool, value)
    return best


def return_per_node_figure(block: Mapping, horizon_months: int) -> go.Figure:
    """Cash per node of each option of one block, with freed power stacked on top as opportunity.

    The freed-power part is shown apart because it is an opportunity value (the wholesale rent
    of the kilowatts the migration reuses), not cash from the old node; an operator should see
    how much of a leaving option's lead would rest on it. Redeploy is the block's best pool.
    """
    title = f"Return per node over {horizon_months} months"
    options = [(name, block["options"][name]) for name in OUTSIDE_OPTIONS if name in block.get("options", {})]
    redeploy = best_redeploy(block)
    if redeploy is not None:
        options.insert(0, ("redeploy", redeploy[1]))
    if not options:
        return _empty(title, "No option was valued for this block.")
    names = [name for name, _ in options]
    figure = go.Figure(
        data=[
            go.Bar(
                name="cash (margin, proceeds, residual)", x=names, y=[float(Decimal(v["cash"])) for _, v in options]
            ),
            go.Bar(
                name="opportunity: reused power (not cash)",
                x=names,
                y=[float(Decimal(v["freed_power_value"])) for _, v in options],
            ),
        ]
    )
    figure.update_layout(barmode="relative", title=title, yaxis_title="USD per node")
    return figure


def split_figure(result: Mapping) -> go.Figure:
    """Nodes per option, all four in the fixed option order (zeros included, so the chart's
    shape does not change when an option drops out)."""
    title = f"Disposition split over {result['horizon_months']} months ({result['channel']})"
    names = [o.value for o in OPTION_ORDER]
    counts = [int(result["split"].get(name, 0)) for name in names]
    if not any(counts):
        return _empty(title, "No node is assigned in this plan.")
    totals = [f"{Decimal(result['option_returns'].get(name, '0')):,.2f} USD" for name in names]
    figure = go.Figure(data=[go.Bar(x=names, y=counts, text=totals, name="nodes")])
    figure.update_layout(title=title, yaxis_title="nodes")
    return figure


def block_figures(result: Mapping) -> list[tuple[str, go.Figure]]:
    """One return-per-node figure per block of the plan, labelled by the block."""
    return [(b["label"], return_per_node_figure(b, result["horizon_months"])) for b in result.get("blocks", [])]
