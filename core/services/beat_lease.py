"""The single-beat lease (core.beat.SingleBeatScheduler asks it before every tick).

One row; the holder renews it every tick (beat ticks at least every 5 s). Another beat may
take it over only once it is LEASE_TTL old, i.e. the holder died or lost the database: a
beat killed with -9 is replaced within LEASE_TTL, and two beats never schedule at once.
"""

from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import F, Q

from core.models import BeatLease

LEASE_NAME = "celery-beat"
LEASE_TTL = timedelta(seconds=30)


RUN_LOOPS_NAME = "run-loops"  # `manage.py run_loops` (forever): the scheduler without Celery


@transaction.atomic
def hold_beat_lease(*, holder: str, now: datetime, name: str = LEASE_NAME) -> bool:
    """True when `holder` holds (or just took) the lease; False, counted, when another beat does.
    Taking it over (a new holder, or the same one after its lease went stale) records the
    scheduler's start: the loops' first due times count from there (core.loop_metrics)."""
    BeatLease.objects.get_or_create(name=name, defaults={"holder": holder, "renewed_at": now, "started_at": now})
    leases = BeatLease.objects.filter(name=name)
    took = leases.filter(holder=holder, renewed_at__gte=now - LEASE_TTL).update(renewed_at=now)
    if not took:
        took = leases.filter(Q(holder=holder) | Q(renewed_at__lt=now - LEASE_TTL)).update(
            holder=holder, renewed_at=now, started_at=now
        )
    if took:
        return True
    leases.update(refused_ticks=F("refused_ticks") + 1)
    return False


def note_scheduler_start(*, holder: str, now: datetime, name: str = RUN_LOOPS_NAME) -> None:
    """A scheduler that takes no lease (`run_loops`) says when it started."""
    BeatLease.objects.update_or_create(name=name, defaults={"holder": holder, "renewed_at": now, "started_at": now})


def beat_lease() -> BeatLease | None:
    return BeatLease.objects.filter(name=LEASE_NAME).first()


def scheduler_started_at() -> datetime | None:
    """When the scheduler running now (Celery beat's lease holder, or `run_loops`) started: the
    latest start among the schedulers. None when no scheduler ever started."""
    starts = BeatLease.objects.filter(name__in=(LEASE_NAME, RUN_LOOPS_NAME), started_at__isnull=False)
    return max(starts.values_list("started_at", flat=True), default=None)
