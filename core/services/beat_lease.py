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


@transaction.atomic
def hold_beat_lease(*, holder: str, now: datetime) -> bool:
    """True when `holder` holds (or just took) the lease; False, counted, when another beat does."""
    BeatLease.objects.get_or_create(name=LEASE_NAME, defaults={"holder": holder, "renewed_at": now})
    took = (
        BeatLease.objects.filter(name=LEASE_NAME)
        .filter(Q(holder=holder) | Q(renewed_at__lt=now - LEASE_TTL))
        .update(holder=holder, renewed_at=now)
    )
    if took:
        return True
    BeatLease.objects.filter(name=LEASE_NAME).update(refused_ticks=F("refused_ticks") + 1)
    return False


def beat_lease() -> BeatLease | None:
    return BeatLease.objects.filter(name=LEASE_NAME).first()
