"""Health periodic tasks (thin: one service call)."""

from celery import shared_task

from fleet.tasks import send_bmc_power_actions
from health.services.paging import page_incidents as page_incidents_service
from health.services.rack_power import run_rack_power_check
from health.services.sweep import run_health_sweep


@shared_task(name="health.tasks.health_sweep", soft_time_limit=25, time_limit=60)
def health_sweep() -> dict:
    summary = run_health_sweep()
    if summary.get("bmc_power_cycles"):
        # The sweep has committed its power cycles: send them now rather than at the next sync.
        send_bmc_power_actions.delay()
    return summary


@shared_task(name="health.tasks.rack_power_check", soft_time_limit=30, time_limit=50)
def rack_power_check() -> dict | None:
    return run_rack_power_check()


@shared_task(name="health.tasks.page_incidents", soft_time_limit=25, time_limit=30)
def page_incidents() -> dict:
    return page_incidents_service()
