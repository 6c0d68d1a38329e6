"""Loop metrics every process can see: each periodic task's last pass (when it finished, how
long it took, how many passes, how many failed) in the database (core.LoopRun), written by a
Celery signal for every task in core/periodic.py and by `manage.py run_loops`; read per scrape
by /metrics and by the operator overview's "late loops" tile.

A loop is **late** when it never ran or its last pass finished more than three intervals ago
(the same rule as core.services.loop_clock's outages); **lag** is how far past its next due
time it is (0 while on time).
"""

import math
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from core.models import LoopRun
from core.periodic import PERIODIC_TASKS, PeriodicSpec
from core.services.loop_clock import outage_after

HOUR, DAY = 3600, 86400


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


@dataclass(frozen=True)
class LoopStatus:
    name: str
    interval_s: int
    last_finished_at: datetime | None
    last_duration_s: float | None
    runs: int
    total_seconds: float
    failures: int
    lag_s: float  # seconds past its next due time; inf when it never ran
    late: bool


def loop_statuses(now: datetime) -> list[LoopStatus]:
    """Every periodic loop (and any other recorded one), in schedule order; one query."""
    recorded = {row.name: row for row in LoopRun.objects.all()}
    intervals = {loop_label(spec.task): interval_seconds(spec) for spec in PERIODIC_TASKS}
    for name in recorded:
        intervals.setdefault(name, 60)
    out = []
    for name, interval in intervals.items():
        row = recorded.get(name)
        if row is None:
            out.append(LoopStatus(name, interval, None, None, 0, 0.0, 0, math.inf, True))
            continue
        since = (now - row.last_finished_at).total_seconds()
        late = since > outage_after(timedelta(seconds=interval)).total_seconds()
        out.append(
            LoopStatus(
                name,
                interval,
                row.last_finished_at,
                row.last_duration_seconds,
                row.runs,
                row.total_seconds,
                row.failures,
                max(0.0, since - interval),
                late,
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
