"""Loop clocks: has this loop been running, or was it (or the control plane) away?

A loop calls `note_run(name, now, interval)` at the start of each pass, inside its advisory
lock. When the previous pass is older than `outage_after(interval)` nobody could act in the
gap (database, broker, beat or worker down), so the call reports the gap and the loop re-arms
what it times: pending deadlines move by the gap, leases restart at `resumed_at`.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta

from core.models import LoopClock

# Three missed passes (never under a minute) is an outage, not scheduling jitter.
MISSED_PASSES = 3
MIN_OUTAGE = timedelta(seconds=60)


@dataclass(frozen=True)
class Outage:
    started: datetime  # the last pass before the gap
    ended: datetime  # this pass

    @property
    def length(self) -> timedelta:
        return self.ended - self.started


def outage_after(interval: timedelta) -> timedelta:
    return max(MISSED_PASSES * interval, MIN_OUTAGE)


def note_run(name: str, *, now: datetime, interval: timedelta) -> Outage | None:
    """Record this pass; return the outage it ended, if the previous pass was too long ago.
    A clock moved backwards (another process's `now`) is not an outage and does not rewind."""
    clock = LoopClock.objects.select_for_update().filter(name=name).first()
    if clock is None:
        LoopClock.objects.create(name=name, last_run_at=now)
        return None
    outage = None
    if now - clock.last_run_at > outage_after(interval):
        outage = Outage(started=clock.last_run_at, ended=now)
        clock.resumed_at, clock.outages = now, clock.outages + 1
        clock.last_gap_seconds = int(outage.length.total_seconds())
    if now > clock.last_run_at:
        clock.last_run_at = now
    clock.save()
    return outage


def resumed_at(name: str) -> datetime | None:
    """End of the loop's last detected outage (None if it never had one)."""
    return LoopClock.objects.filter(name=name).values_list("resumed_at", flat=True).first()
