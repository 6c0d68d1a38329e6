"""Fleet periodic tasks (thin: one service call each; core.loop_metrics times every pass)."""

from celery import shared_task

from fleet.services.power_history import record_power_history as record_power_history_service
from fleet.services.reconcile import reconcile_nodes as reconcile_nodes_service
from fleet.services.snapshots import record_snapshot


@shared_task(name="fleet.tasks.record_fleet_snapshot", soft_time_limit=60, time_limit=90)
def record_fleet_snapshot() -> int | None:
    return record_snapshot()


@shared_task(name="fleet.tasks.reconcile_nodes", soft_time_limit=9, time_limit=12)
def reconcile_nodes() -> dict:
    return reconcile_nodes_service().as_dict()


@shared_task(name="fleet.tasks.record_power_history", soft_time_limit=40, time_limit=55)
def record_power_history() -> dict | None:
    return record_power_history_service()
