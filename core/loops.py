"""Control loops that `manage.py run_loops` drives on a machine without Celery: (the loop's Celery
task in core/periodic.py, dotted service callable taking no arguments). Each callable is the same
service entry point that task calls, and takes its own advisory lock; apps append their loop here.
The exceptions are the outbox's two loops (`CONCURRENT_LOOPS`), which several workers may run at
once: delivery claims each delivery with a conditional update (so a slow receiver never holds a
lock while it answers), and the retention purge deletes by id, which two passes cannot do twice.
Order matters for `--once`: nodes converge first, then allocations, then health.

The name and interval come from the task's PERIODIC_TASKS row, so a loop is recorded under one
name (`core.loop_metrics.loop_label`) whichever runner ran it: /metrics shows one series per loop,
and `run_loops` keeps the beat schedule's interval."""

from dataclasses import dataclass

from core.loop_metrics import loop_label
from core.periodic import PERIODIC_TASKS

LOOPS: tuple[tuple[str, str], ...] = (
    ("fleet.tasks.reconcile_nodes", "fleet.services.reconcile.reconcile_nodes"),
    ("fleet.tasks.advance_bring_up", "fleet.services.bring_up.advance_bring_up"),
    ("fleet.tasks.advance_rollouts", "fleet.services.rollouts.advance_rollouts"),
    ("tenants.tasks.allocation_loop", "tenants.services.allocation_loop.run_allocation_loop"),
    ("health.tasks.health_sweep", "health.services.sweep.run_health_sweep"),
    ("fleet.tasks.record_power_history", "fleet.services.power_history.record_power_history"),
    ("health.tasks.rack_power_check", "health.services.rack_power.run_rack_power_check"),
    ("fleet.tasks.bmc_power_sync", "fleet.services.power_sync.run_power_sync"),
    ("billing.tasks.ensure_ledger_partitions", "billing.services.ledger_partitions.ensure_usage_partitions"),
    ("health.tasks.page_incidents", "health.services.paging.page_incidents"),
    ("core.tasks.deliver_notifications", "core.outbox.deliver_due"),
    ("core.tasks.purge_notifications", "core.outbox.purge_expired"),
)


# Loops that run side by side in several workers: each row is claimed, or deleted once, by itself.
CONCURRENT_LOOPS = frozenset({"core.tasks.deliver_notifications", "core.tasks.purge_notifications"})


@dataclass(frozen=True)
class ControlLoop:
    name: str  # the metric name, the same as the Celery task's (loop_label)
    callable_path: str
    every_seconds: int
    exclusive: bool = True  # one worker at a time (its advisory lock); False: safe side by side (CONCURRENT_LOOPS)


def control_loops() -> list[ControlLoop]:
    """LOOPS with each loop's name and interval from its periodic task; a loop without an
    interval-scheduled periodic task is a mistake in this file, refused by name."""
    intervals = {spec.task: spec.every_seconds for spec in PERIODIC_TASKS}
    loops = []
    for task, callable_path in LOOPS:
        if not intervals.get(task):
            raise LookupError(f"core/loops.py names {task}, which is no interval task of core/periodic.py")
        loops.append(ControlLoop(loop_label(task), callable_path, intervals[task], task not in CONCURRENT_LOOPS))
    return loops
