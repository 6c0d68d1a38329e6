"""Power history per rack (halls are the sum of their racks): one point a minute, kept 30 days,
downsampled to one point an hour, kept 2 years (the power_history beat task, every minute).

Points are written from the same selector as the power page (`racks_with_draw`), so a point
carries the page's source mix; an hour's point is the mean of its minutes, its `kw_max` the
highest minute, and its source the minutes' source if they all agree, else `mixed`.
"""

from datetime import datetime, timedelta

from django.db.models import Avg, Count, Max, Min
from django.utils import timezone

from core.locks import locked_run
from fleet.models import PowerPoint
from fleet.selectors import racks_with_draw

MINUTE = timedelta(minutes=1)
HOUR = timedelta(hours=1)
KEEP_MINUTES = timedelta(days=30)
KEEP_HOURS = timedelta(days=730)
RESOLUTION_MINUTE, RESOLUTION_HOUR = "1m", "1h"
BATCH = 2000
DOWNSAMPLE_LOOKBACK_HOURS = 3  # a missed run catches up on the last few hours


def _minute(moment: datetime) -> datetime:
    return moment.replace(second=0, microsecond=0)


def record_minute(*, now: datetime) -> int:
    """This minute's point for every occupied rack (a second run in the same minute writes nothing)."""
    at = _minute(now)
    points = [
        PowerPoint(
            rack_id=r.pk,
            resolution=RESOLUTION_MINUTE,
            at=at,
            kw=round(r.drawn, 3),
            kw_max=round(r.drawn, 3),
            source=r.sources.source,
            nodes=r.node_count,
            measured_nodes=r.sources.measured,
        )
        for r in racks_with_draw(now=now)
        if r.node_count
    ]
    PowerPoint.objects.bulk_create(points, batch_size=BATCH, ignore_conflicts=True)
    return len(points)


def downsample(*, now: datetime) -> int:
    """Hourly points for the last complete hours that lack them: one grouped query per hour."""
    written = 0
    this_hour = now.replace(minute=0, second=0, microsecond=0)
    for back in range(DOWNSAMPLE_LOOKBACK_HOURS, 0, -1):
        hour = this_hour - back * HOUR
        if PowerPoint.objects.filter(resolution=RESOLUTION_HOUR, at=hour).exists():
            continue
        rows = (
            PowerPoint.objects.filter(resolution=RESOLUTION_MINUTE, at__gte=hour, at__lt=hour + HOUR)
            .values("rack_id")
            .annotate(
                kw=Avg("kw"),
                kw_max=Max("kw_max"),
                lo=Min("source"),
                hi=Max("source"),
                nodes=Max("nodes"),
                measured=Min("measured_nodes"),
                n=Count("id"),
            )
            .order_by()
        )
        points = [
            PowerPoint(
                rack_id=r["rack_id"],
                resolution=RESOLUTION_HOUR,
                at=hour,
                kw=round(r["kw"], 3),
                kw_max=r["kw_max"],
                source=r["lo"] if r["lo"] == r["hi"] else "mixed",
                nodes=r["nodes"],
                measured_nodes=r["measured"],
            )
            for r in rows
        ]
        PowerPoint.objects.bulk_create(points, batch_size=BATCH, ignore_conflicts=True)
        written += len(points)
    return written


def prune(*, now: datetime) -> int:
    minutes, _ = PowerPoint.objects.filter(resolution=RESOLUTION_MINUTE, at__lt=now - KEEP_MINUTES).delete()
    hours, _ = PowerPoint.objects.filter(resolution=RESOLUTION_HOUR, at__lt=now - KEEP_HOURS).delete()
    return minutes + hours


def record_power_history(*, now: datetime | None = None) -> dict | None:
    """One run of the loop; None when another run holds the lock."""
    now = now or timezone.now()
    with locked_run("power_history") as acquired:
        if not acquired:
            return None
        return {"minute_points": record_minute(now=now), "hour_points": downsample(now=now), "pruned": prune(now=now)}
