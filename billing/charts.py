"""Plotly figures of the billing portal (pure: same data, same figure; tested as data)."""

from datetime import date, timedelta
from decimal import Decimal

import plotly.graph_objects as go

from core.charts import say_when_empty


def daily_gpu_hours_figure(daily: dict[str, dict[date, Decimal]], *, start: date, end: date) -> go.Figure:
    """Stacked bars: GPU-hours per UTC day in [start, end), one trace per SKU, missing days as 0."""
    days = [start + timedelta(days=i) for i in range((end - start).days)]
    figure = go.Figure(
        data=[
            go.Bar(name=sku, x=[d.isoformat() for d in days], y=[float(daily[sku].get(d, 0)) for d in days])
            for sku in sorted(daily)
        ]
    )
    figure.update_layout(
        barmode="stack",
        title="GPU-hours per day by instance type (UTC)",
        yaxis_title="GPU-hours",
        xaxis_title="day",
        margin={"t": 40, "r": 10, "b": 40, "l": 50},
        legend={"orientation": "h"},
    )
    return say_when_empty(figure)
