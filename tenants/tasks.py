"""Tenancy periodic tasks (thin: one service call)."""

from celery import shared_task

from tenants.services.allocation_loop import run_allocation_loop


@shared_task(name="tenants.tasks.allocation_loop", soft_time_limit=8, time_limit=9)
def allocation_loop() -> dict:
    result = run_allocation_loop()
    return {"skipped": result.skipped, **result.counts}
