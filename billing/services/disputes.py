"""Disputed usage: held out of rating until an operator accepts or rejects it.

A dispute is opened for a usage row whose grant verified but which the control plane's
allocation history contradicts (billing.reconcile.contradicted_usage). Billing runs open them
before rating, so a finalized invoice never contains disputed usage. One transition table,
one `transition()` that checks permission, validates, audits.

Accepting usage whose billing already passed it by (its period was finalized while it was held)
records a late-usage adjustment, so it is charged exactly once, on the next invoice.
"""

from datetime import datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.db import transaction
from django.db.models import Max, Q
from django.utils import timezone

from billing.models import (
    Adjustment,
    AdjustmentKind,
    BillingRun,
    DisputeStatus,
    UsageDispute,
)
from billing.periods import format_period
from billing.reconcile import contradicted_usage
from billing.services.rating import PriceBook, split_by_time, usage_amount
from core.locks import advisory_lock
from core.services.audit import record_audit

LEDGER = "ledger"
RESOLVE_PERMISSION = "billing.resolve_usagedispute"

TRANSITIONS: dict[str, frozenset[str]] = {
    DisputeStatus.OPEN: frozenset({DisputeStatus.ACCEPTED, DisputeStatus.REJECTED}),
    DisputeStatus.ACCEPTED: frozenset(),
    DisputeStatus.REJECTED: frozenset(),
}


class DisputeError(Exception):
    """A resolution that must not happen; `code` is the problem code, `status` the HTTP status."""

    def __init__(self, status: int, code: str, detail: str):
        super().__init__(detail)
        self.status, self.code, self.detail = status, code, detail


def hold_disputed_usage(*, scope: Q, now: datetime | None = None, spans: dict | None = None) -> int:
    """Open a dispute for every row in `scope` the allocation history contradicts (idempotent).
    Returns how many were opened. `spans`: as billing.reconcile.contradicted_usage takes them
    (a billing run's come from billing.services.rating.run_spans)."""
    now = now or timezone.now()
    tolerance = timedelta(seconds=settings.BILLING_DISPUTE_TOLERANCE_SECONDS)
    found = contradicted_usage(scope=scope, tolerance=tolerance, now=now, spans=spans)
    created = UsageDispute.objects.using(LEDGER).bulk_create(
        [
            UsageDispute(
                usage_event_id=c.usage_event_id,
                tenant_id=c.tenant_id,
                period=c.period,
                reason=c.reason[:500],
                opened_at=now,
            )
            for c in found
        ],
        ignore_conflicts=True,
        batch_size=1000,
    )
    return len(created)


def _billed_past(dispute: UsageDispute) -> bool:
    """Has a finalized run already passed this row by (it would have been on that invoice)?"""
    row = dispute.usage_event
    return (
        BillingRun.objects.using(LEDGER).filter(finalize=True, period__gte=row.period, watermark__gte=row.pk).exists()
    )


def _late_charges(dispute: UsageDispute, actor: str) -> list[Adjustment]:
    """The accepted row as late usage, priced like any usage of its month: by the price-book
    version in force while it ran (split at a version change inside it, quantity by time, the
    remainder on the last piece), each piece carrying its unit price and version."""
    row = dispute.usage_event
    book = PriceBook.load()
    pieces = split_by_time(row.start, row.end, row.quantity_micro, book.change_times)
    out = []
    for i, (lo, hi, micro) in enumerate(pieces):
        price = book.price_at(row.sku, lo)
        if price is None:
            raise DisputeError(409, "unpriced_sku", f"{row.sku} has no price in the price book; add one, then accept.")
        out.append(
            Adjustment.objects.using(LEDGER).create(
                kind=AdjustmentKind.LATE_USAGE,
                tenant_id=row.tenant_id,
                allocation_id=row.allocation_id,
                node_id=row.node_id,
                sku=row.sku,
                start=lo,
                end=hi,
                period=row.period,
                quantity_micro=micro,
                amount=usage_amount(micro, price.unit_price),
                currency=price.currency,
                unit_price=price.unit_price,
                price_version=price.version,
                rate=Decimal("1"),
                actor=actor[:200],
                reason=(
                    f"{row.sku} usage of {format_period(row.period)} accepted after review (was disputed), "
                    f"at {price.unit_price.normalize():f} {price.currency}/GPU-hour (price book v{price.version})"
                ),
                reference=f"dispute {dispute.public_id}",
                dedupe_key=f"dispute:{dispute.public_id}" + (f":{i}" if i else ""),
            )
        )
    return out


def transition(*, dispute_id, to_status: str, user, actor: str, note: str) -> UsageDispute:
    """Accept or reject one open dispute. Checks the permission, the move and the note; audited."""
    if user is None or not user.has_perm(RESOLVE_PERMISSION):
        raise DisputeError(
            403,
            "permission_denied",
            f"Resolving disputed usage needs the {RESOLVE_PERMISSION} permission; ask an administrator.",
        )
    note = (note or "").strip()
    if not note:
        raise DisputeError(400, "validation_error", "Say why (the note is kept in the audit trail).")
    # The billing-run lock: a run never rates a row while its dispute changes under it.
    with transaction.atomic(using=LEDGER), advisory_lock("billing_run", using=LEDGER) as acquired:
        if not acquired:
            raise DisputeError(409, "billing_run_in_progress", "A billing run is in progress; retry in a minute.")
        dispute = (
            UsageDispute.objects.using(LEDGER)
            .select_for_update()
            .select_related("usage_event")
            .filter(public_id=dispute_id)
            .first()
        )
        if dispute is None:
            raise DisputeError(404, "not_found", "No such disputed usage.")
        if to_status not in TRANSITIONS[dispute.status]:
            raise DisputeError(
                409,
                "invalid_transition",
                f"This dispute is already {dispute.status}; only open disputes can be resolved.",
            )
        before = dispute.status
        if to_status == DisputeStatus.ACCEPTED and _billed_past(dispute):
            dispute.adjustment = _late_charges(dispute, actor)[0]
        dispute.status = to_status
        # Decisions are numbered (under the billing-run lock): a run records the last it saw.
        last = UsageDispute.objects.using(LEDGER).aggregate(m=Max("decision_seq"))["m"] or 0
        dispute.decision_seq = last + 1
        dispute.resolved_at = timezone.now()
        dispute.resolved_by = actor[:200]
        dispute.resolution_note = note
        dispute.save(
            using=LEDGER,
            update_fields=["status", "resolved_at", "resolved_by", "resolution_note", "adjustment", "decision_seq"],
        )
    record_audit(
        actor=actor,
        action=f"billing.dispute_{'accept' if to_status == DisputeStatus.ACCEPTED else 'reject'}",
        target=dispute,
        before={"status": before},
        reason=note,
        after={
            "status": to_status,
            "usage_event": dispute.usage_event_id,
            "late_charge": str(dispute.adjustment.amount) if dispute.adjustment else None,
        },
    )
    return dispute
