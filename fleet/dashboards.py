"""The dashboards' figures by name: what a page embeds and what its refresh endpoint answers."""

from collections.abc import Callable
from datetime import datetime, timedelta

import plotly.graph_objects as go

from . import charts
from .models import SnapshotResolution
from .selectors import (
    fleet_summary,
    hall_power,
    hall_power_history,
    rack_load_fraction,
    racks_with_draw,
    utilisation_history,
)


def _utilisation_24h(now: datetime) -> go.Figure:
    points = utilisation_history(since=now - timedelta(hours=24), resolution=SnapshotResolution.FIVE_MINUTES)
    return charts.utilisation(points, title="GPU utilisation, last 24 h (5-minute points)")


def _utilisation_30d(now: datetime) -> go.Figure:
    points = utilisation_history(since=now - timedelta(days=30), resolution=SnapshotResolution.HOURLY)
    return charts.utilisation(points, title="GPU utilisation, last 30 days (hourly points)")


def _rack_load(now: datetime) -> go.Figure:
    return charts.rack_load([100 * rack_load_fraction(r) for r in racks_with_draw(now=now) if r.node_count])


def _power_24h(now: datetime) -> go.Figure:
    points = hall_power_history(since=now - timedelta(hours=24), resolution="1m")
    return charts.hall_power_history(points, title="Hall wall draw, last 24 h (1-minute points)")


def _power_30d(now: datetime) -> go.Figure:
    points = hall_power_history(since=now - timedelta(days=30), resolution="1h")
    return charts.hall_power_history(points, title="Hall wall draw, last 30 days (hourly points)")


FIGURES: dict[str, Callable[[datetime], go.Figure]] = {
    "gpus-by-state": lambda now: charts.gpus_by_state(fleet_summary().by_state),
    "utilisation-24h": _utilisation_24h,
    "utilisation-30d": _utilisation_30d,
    "hall-power": lambda now: charts.hall_power(hall_power(now=now)),
    "rack-load": _rack_load,
    "power-24h": _power_24h,
    "power-30d": _power_30d,
}
