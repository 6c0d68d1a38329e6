"""Fleet periodic tasks (thin: one service call)."""
import time

from celery import shared_task

from core.metrics import observe_loop
from fleet.services.snapshots import record_snapshot


@shared_task(name="fleet.tasks.record_fleet_snapshot", soft_time_limit=60, time_limit=90)
def record_fleet_snapshot() -> int | None:
    started = time.perf_counter()
    written = record_snapshot()
    observe_loop("fleet_snapshot", time.perf_counter() - started)
    return written
