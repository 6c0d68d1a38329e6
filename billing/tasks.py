"""Billing's periodic tasks (thin: one service call each)."""

from celery import shared_task
from django.utils import timezone

from billing.services.ledger_partitions import ensure_usage_partitions
from billing.services.runs import finalize_due, refresh_drafts


@shared_task(name="billing.tasks.refresh_draft_invoices", soft_time_limit=300, time_limit=360)
def refresh_draft_invoices() -> int:
    return len(refresh_drafts(now=timezone.now(), actor="system:billing_refresh"))


@shared_task(name="billing.tasks.finalize_closed_periods", soft_time_limit=300, time_limit=360)
def finalize_closed_periods() -> int:
    return len(finalize_due(now=timezone.now(), actor="system:billing_finalize"))


@shared_task(name="billing.tasks.ensure_ledger_partitions", soft_time_limit=120, time_limit=180)
def ensure_ledger_partitions() -> int:
    return len(ensure_usage_partitions(now=timezone.now()) or ())


@shared_task(name="billing.tasks.verify_invoices", soft_time_limit=300, time_limit=360)
def verify_invoices() -> int:
    """Nightly: recompute every live invoice. Differences fail the task, so the loop's failure
    count (/metrics, the operator overview's loop tile) raises the alert; each is logged."""
    from billing.verification import VerificationFailed, run_verification

    report, _ = run_verification(actor="system:billing_verify")
    if report.differences:
        raise VerificationFailed(f"{len(report.differences)} invoice differences; see /billing/verification/")
    return report.invoices
