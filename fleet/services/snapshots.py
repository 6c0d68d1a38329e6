"""Utilisation history: the fleet_snapshot loop and the demo's back-filled month.

Each run records, per (generation, hall), node counts per lifecycle, GPUs total / healthy /
allocated / in repair and drawn kW, at 5-minute and hourly resolution, then prunes what is past
retention. Snapshots are measurements, not decisions, so they carry no audit rows.
"""

import math
import random
from collections.abc import Iterable
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Count, F, Q, Sum
from django.db.models.functions import Coalesce
from django.utils import timezone

from core.locks import locked_run
from fleet.choices import Health
from fleet.models import FleetSnapshot, Node, SnapshotResolution
from fleet.selectors import ALLOCATED_STATES, REPAIR_STATES, drawn_kw_expr

FIVE_MINUTES = timedelta(minutes=5)
KEEP_FIVE_MINUTE = timedelta(hours=48)
KEEP_HOURLY = timedelta(days=90)
BATCH = 2000


def _floor(moment: datetime, step: timedelta) -> datetime:
    seconds = int(step.total_seconds())
    return datetime.fromtimestamp(int(moment.timestamp()) // seconds * seconds, tz=moment.tzinfo)


def current_points(*, now: datetime) -> list[dict]:
    """The fleet right now, per (generation, hall): one grouped query."""
    gpus = F("node_type__gpus_per_node")
    rows = (
        Node.objects.values(generation=F("node_type__generation"), hall=F("rack__hall_id"), state=F("lifecycle"))
        .annotate(
            nodes=Count("id"),
            gpus=Coalesce(Sum(gpus), 0),
            healthy=Coalesce(Sum(gpus, filter=Q(health=Health.HEALTHY)), 0),
            power=Coalesce(Sum(drawn_kw_expr(now)), 0.0),
        )
        .order_by()
    )
    points: dict[tuple, dict] = {}
    for r in rows:
        p = points.setdefault(
            (r["generation"], r["hall"]),
            {
                "generation": r["generation"],
                "hall_id": r["hall"],
                "nodes": 0,
                "gpus_total": 0,
                "gpus_healthy": 0,
                "gpus_allocated": 0,
                "gpus_in_repair": 0,
                "nodes_by_lifecycle": {},
                "power_kw": 0.0,
            },
        )
        p["nodes"] += r["nodes"]
        p["gpus_total"] += r["gpus"]
        p["gpus_healthy"] += r["healthy"]
        p["gpus_allocated"] += r["gpus"] if r["state"] in ALLOCATED_STATES else 0
        p["gpus_in_repair"] += r["gpus"] if r["state"] in REPAIR_STATES else 0
        p["nodes_by_lifecycle"][r["state"]] = r["nodes"]
        p["power_kw"] += r["power"]
    return list(points.values())


def _rows(points: Iterable[dict], *, at: datetime, resolution: str) -> list[FleetSnapshot]:
    return [FleetSnapshot(at=at, resolution=resolution, **{**p, "power_kw": round(p["power_kw"], 2)}) for p in points]


def prune(*, now: datetime) -> int:
    deleted, _ = FleetSnapshot.objects.filter(
        Q(resolution=SnapshotResolution.FIVE_MINUTES, at__lt=now - KEEP_FIVE_MINUTE)
        | Q(resolution=SnapshotResolution.HOURLY, at__lt=now - KEEP_HOURLY)
    ).delete()
    return deleted


def record_snapshot(*, now: datetime | None = None) -> int | None:
    """One run of the loop: write this 5-minute point (and the hour's point if it is the first
    of its hour), prune past retention. Returns rows written, or None when another run holds the lock."""
    now = now or timezone.now()
    with locked_run("fleet_snapshot") as acquired:
        if not acquired:
            return None
        points = current_points(now=now)
        # A point already recorded for this slot stays (two runs in one slot write it once).
        rows = _rows(points, at=_floor(now, FIVE_MINUTES), resolution=SnapshotResolution.FIVE_MINUTES)
        rows += _rows(points, at=_floor(now, timedelta(hours=1)), resolution=SnapshotResolution.HOURLY)
        FleetSnapshot.objects.bulk_create(rows, ignore_conflicts=True, batch_size=BATCH)
        prune(now=now)
    return len(rows)


def _demo_utilisation(moment: datetime, rng: random.Random) -> float:
    """A plausible allocated share: a slow climb over the month, a daily swing peaking mid-afternoon
    UTC, lower at weekends, with noise."""
    days_ago = (timezone.now() - moment).total_seconds() / 86400
    trend = 0.70 - 0.006 * days_ago
    daily = 0.08 * math.sin((moment.hour + moment.minute / 60 - 9) / 24 * 2 * math.pi)
    weekend = -0.06 if moment.weekday() >= 5 else 0.0
    return min(0.97, max(0.05, trend + daily + weekend + rng.gauss(0, 0.015)))


RAMP_TO_LIVE = timedelta(hours=6)


@transaction.atomic
def backfill_history(*, now: datetime, days: int = 30, seed: int = 11) -> int:
    """Invent `days` of hourly and 48 h of 5-minute history shaped like the fleet as it is now."""
    rng = random.Random(seed)
    points = current_points(now=now)
    rows: list[FleetSnapshot] = []
    schedule = [
        (SnapshotResolution.HOURLY, timedelta(hours=1), timedelta(days=days)),
        (SnapshotResolution.FIVE_MINUTES, FIVE_MINUTES, KEEP_FIVE_MINUTE),
    ]
    for resolution, step, span in schedule:
        start = _floor(now - span, step)
        moment = start
        while moment < now - step:
            invented = _demo_utilisation(moment, rng)
            # The last hours ramp to the fleet as it is now, so the history meets the live
            # value instead of dropping to a cliff at "now".
            toward_live = max(0.0, 1 - (now - moment) / RAMP_TO_LIVE)
            for p in points:
                total = p["gpus_total"]
                per_node = total // max(p["nodes"], 1)
                live_share = p["gpus_allocated"] / total if total else 0.0
                share = invented + (live_share - invented) * toward_live
                allocated = int(round(total * share / max(per_node, 1))) * per_node
                invented_repair = per_node * rng.randint(0, max(1, p["nodes"] // 100))
                repair = int(round(invented_repair + (p["gpus_in_repair"] - invented_repair) * toward_live))
                rated_kw_per_node = p["power_kw"] / max(p["nodes"], 1)
                busy_nodes = allocated // max(per_node, 1)
                rows.append(
                    FleetSnapshot(
                        at=moment,
                        resolution=resolution,
                        generation=p["generation"],
                        hall_id=p["hall_id"],
                        nodes=p["nodes"],
                        gpus_total=total,
                        gpus_healthy=total - repair,
                        gpus_allocated=allocated,
                        gpus_in_repair=repair,
                        nodes_by_lifecycle={"active": busy_nodes, "available": p["nodes"] - busy_nodes},
                        # idle nodes draw about 40 % of their rated maximum, busy ones about 85 %
                        power_kw=round(rated_kw_per_node * (0.85 * busy_nodes + 0.40 * (p["nodes"] - busy_nodes)), 2),
                    )
                )
            moment += step
    FleetSnapshot.objects.bulk_create(rows, ignore_conflicts=True, batch_size=BATCH)
    return len(rows)


def seed_demo_history(stdout) -> None:
    """Demo step: a month of utilisation history so the Overview's charts have content."""
    if FleetSnapshot.objects.exists():
        stdout.write("  utilisation history already present")
        return
    written = backfill_history(now=timezone.now())
    stdout.write(f"  back-filled {written} utilisation snapshots (30 days hourly, 48 h at 5 minutes)")
