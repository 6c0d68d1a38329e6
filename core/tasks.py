"""Core periodic tasks (thin: one service call)."""

from celery import shared_task

from core.api.idempotency import purge_expired_keys
from core.outbox import deliver_due, purge_expired


@shared_task(name="core.tasks.purge_idempotency_keys", soft_time_limit=120, time_limit=180)
def purge_idempotency_keys() -> int:
    return purge_expired_keys()


@shared_task(name="core.tasks.deliver_notifications", soft_time_limit=50, time_limit=60)
def deliver_notifications() -> dict:
    return deliver_due()


@shared_task(name="core.tasks.purge_notifications", soft_time_limit=300, time_limit=360)
def purge_notifications() -> dict:
    return purge_expired()
