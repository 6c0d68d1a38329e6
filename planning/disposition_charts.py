"""Plotly figures for the disposition console, built from valuation results.

Pure functions: the same inputs give the same figure, so the figures are tested
as data and the Django layer only serialises them (``fig.to_json()``). Values
are rounded to cents here, at presentation, never earlier.
"""

from __future__ import annotations

import plotly.graph_objects as go

from planning.engines.disposition.types import OPTION_ORDER, DispositionRecommendation, OptionValues, to_cents


def return_per_node_figure(values: OptionValues, horizon_months: int) -> go.Figure:
    """Cash per node of each available option, with freed power stacked on top as opportunity.

    The freed-power part is shown apart because it is an opportunity value (the wholesale rent
    of the kilowatts the migration reuses), not cash from the old node; an operator should see
    how much of a leaving option's lead would rest on it.
    """
    options = values.available()
    names = [v.option.value for v in options]
    freed = [to_cents(v.freed_power_value) for v in options]
    cash = [float(to_cents(v.cash)) for v in options]
    figure = go.Figure(
        data=[
            go.Bar(name="cash (margin, proceeds, residual)", x=names, y=cash),
            go.Bar(name="opportunity: reused power (not cash)", x=names, y=[float(f) for f in freed]),
        ]
    )
    figure.update_layout(
        barmode="relative",
        title=f"Return per node over {horizon_months} months",
        yaxis_title="USD per node",
    )
    return figure


def split_figure(recommendation: DispositionRecommendation) -> go.Figure:
    """Nodes per option, all four in the fixed option order (zeros included, so
    the chart's shape does not change when an option drops out)."""
    names = [o.value for o in OPTION_ORDER]
    counts = [recommendation.node_counts[o] for o in OPTION_ORDER]
    totals = [f"{to_cents(recommendation.option_returns[o]):,.2f} USD" for o in OPTION_ORDER]
    figure = go.Figure(data=[go.Bar(x=names, y=counts, text=totals, name="nodes")])
    figure.update_layout(
        title=f"Disposition split over {recommendation.horizon_months} months ({recommendation.channel})",
        yaxis_title="nodes",
    )
    return figure
