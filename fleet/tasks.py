"""Fleet periodic tasks (thin: one service call each; core.loop_metrics times every pass)."""

from celery import shared_task

from fleet.services.bring_up import advance_bring_up as advance_bring_up_service
from fleet.services.power_actions import send_power_actions
from fleet.services.power_history import record_power_history as record_power_history_service
from fleet.services.power_sync import run_power_sync
from fleet.services.reconcile import reconcile_nodes as reconcile_nodes_service
from fleet.services.rollouts import advance_rollouts as advance_rollouts_service
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


@shared_task(name="fleet.tasks.advance_bring_up", soft_time_limit=25, time_limit=30)
def advance_bring_up() -> dict:
    return advance_bring_up_service().as_dict()


@shared_task(name="fleet.tasks.advance_rollouts", soft_time_limit=25, time_limit=30)
def advance_rollouts() -> dict:
    return advance_rollouts_service().as_dict()


@shared_task(name="fleet.tasks.bmc_power_sync", soft_time_limit=55, time_limit=58)
def bmc_power_sync() -> dict:
    return run_power_sync()


@shared_task(name="fleet.tasks.send_bmc_power_actions", soft_time_limit=50, time_limit=55)
def send_bmc_power_actions() -> int:
    """Queued on commit by the health loop so its power cycles go out now, not at the next sync."""
    return len(send_power_actions(actor="system:health_sweep"))
