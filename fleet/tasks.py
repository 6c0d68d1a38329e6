"""Fleet periodic tasks (thin: one service call)."""
from celery import shared_task

from fleet.services.reconcile import reconcile_nodes as reconcile_nodes_service


@shared_task(name="fleet.tasks.reconcile_nodes", soft_time_limit=9, time_limit=12)
def reconcile_nodes() -> dict:
    return reconcile_nodes_service().as_dict()
