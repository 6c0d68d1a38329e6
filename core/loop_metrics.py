"""Loop metrics every process can see: each periodic task's last pass (when it finished, how
long it took, how many passes, how many failed) in the database (core.LoopRun), written by a
Celery signal for every task in core/periodic.py and by `manage.py run_loops`; read per scrape
by /metrics, by the operator overview's "late loops" tile and (through /metrics) by the
Prometheus alert rules in deploy/prometheus/: one rule, one place.

A loop is **due** one interval after its last pass, or one interval after the scheduler
started when that is later (a loop that has not reached its first due time since the
scheduler started is not late, however long ago it last ran). It is **late** when its due
time plus a grace has passed without a pass: the grace is two intervals, at least a minute and
at most an hour (scheduling jitter and one slow pass are not an alarm; a daily loop is late an
hour after it was due, not three days). With no scheduler ever started, nothing will run:
every loop that never ran is late, due from the epoch. **lag** is how far past its due time
it is (0 while on time).

A crontab loop counts as hourly (hour `*`) or daily: its first due time is an interval after
the start at the latest, never earlier than the cron line would say, so it never raises a
false alarm; it may be late up to one interval after the cron time before it shows.
"""

import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from core.models import LoopRun
from core.periodic import PERIODIC_TASKS, PeriodicSpec
from core.services.beat_lease import scheduler_started_at

HOUR, DAY = 3600, 86400
MIN_GRACE, MAX_GRACE = 60, HOUR
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def loop_label(task_name: str) -> str:
    """`health.tasks.health_sweep` → `health_sweep`."""
    return task_name.rsplit(".", 1)[-1]


def interval_seconds(spec: PeriodicSpec) -> int:
    """How often the loop is due: its interval, or for a crontab hourly (hour `*`) or daily."""
    if spec.every_seconds:
        return spec.every_seconds
    hour = (spec.crontab or "* *").split()[1]
    return HOUR if hour == "*" else DAY


def record_loop_run(name: str, *, seconds: float, finished_at: datetime, failed: bool = False) -> None:
    """One pass finished (or failed): an atomic upsert, safe from any number of processes."""
    changes = {
        "last_finished_at": finished_at,
        "last_duration_seconds": seconds,
        "runs": F("runs") + 1,
        "total_seconds": F("total_seconds") + seconds,
        "failures": F("failures") + (1 if failed else 0),
    }
    if LoopRun.objects.filter(name=name).update(**changes):
        return
    try:
        with transaction.atomic():
            LoopRun.objects.create(
                name=name,
                last_finished_at=finished_at,
                last_duration_seconds=seconds,
                runs=1,
                total_seconds=seconds,
                failures=1 if failed else 0,
            )
    except IntegrityError:  # another process created it first
        LoopRun.objects.filter(name=name).update(**changes)


def grace_seconds(interval: int) -> int:
    """How long past its due time a loop may be before it is late (module docstring)."""
    return min(max(2 * interval, MIN_GRACE), MAX_GRACE)


def due_at(*, interval: int, last_finished_at: datetime | None, started_at: datetime | None) -> datetime:
    """The loop's next due time: an interval after its last pass or after the scheduler's
    start, whichever is later; the epoch when neither exists (no scheduler: overdue)."""
    anchors = [t for t in (last_finished_at, started_at) if t is not None]
    if not anchors:
        return EPOCH
    return max(anchors) + timedelta(seconds=interval)


@dataclass(frozen=True)
class LoopStatus:
    name: str
    interval_s: int
    last_finished_at: datetime | None
    last_duration_s: float | None
    runs: int
    total_seconds: float
    failures: int
    due_at: datetime  # next due time (the epoch when no scheduler ever started and it never ran)
    grace_s: int
    lag_s: float  # seconds past its next due time (0 on time)
    late: bool
    scheduler_started_at: datetime | None


def loop_statuses(now: datetime) -> list[LoopStatus]:
    """Every periodic loop (and any other recorded one), in schedule order; two queries."""
    recorded = {row.name: row for row in LoopRun.objects.all()}
    started = scheduler_started_at()
    intervals = {loop_label(spec.task): interval_seconds(spec) for spec in PERIODIC_TASKS}
    for name in recorded:
        intervals.setdefault(name, 60)
    out = []
    for name, interval in intervals.items():
        row = recorded.get(name)
        last = row.last_finished_at if row else None
        due = due_at(interval=interval, last_finished_at=last, started_at=started)
        grace = grace_seconds(interval)
        past = (now - due).total_seconds()
        out.append(
            LoopStatus(
                name=name,
                interval_s=interval,
                last_finished_at=last,
                last_duration_s=row.last_duration_seconds if row else None,
                runs=row.runs if row else 0,
                total_seconds=row.total_seconds if row else 0.0,
                failures=row.failures if row else 0,
                due_at=due,
                grace_s=grace,
                lag_s=max(0.0, past),
                late=past > grace,
                scheduler_started_at=started,
            )
        )
    return out


# --- Celery: time every periodic task, in whichever worker runs it -------------------------

_PERIODIC_NAMES = {spec.task for spec in PERIODIC_TASKS}
_started: dict[str, float] = {}


def task_started(task_id=None, task=None, **kwargs):
    if task is not None and task.name in _PERIODIC_NAMES:
        _started[task_id] = time.perf_counter()


def task_finished(task_id=None, task=None, state=None, **kwargs):
    started = _started.pop(task_id, None)
    if started is None or task is None:
        return
    record_loop_run(
        loop_label(task.name),
        seconds=time.perf_counter() - started,
        finished_at=timezone.now(),
        failed=state not in (None, "SUCCESS"),
    )
