"""SLA credits: provider-caused unavailability of a tenant's node, credited on the invoice.

Rule (README "Billing"): a window `[start, end)` during which a tenant's node was
unavailable for a provider-attributed reason (health incident, not the tenant's doing) is
credited at `gpus × hours × the SKU's price-book price × BILLING_SLA_CREDIT_FACTOR`
(default 1: the tenant gets back exactly what the window would have cost). The credit is an
append-only Adjustment of the month the window starts in; rating turns it into a negative
`sla_credit` line. Recording the same (incident, node) twice credits once.
"""
from datetime import datetime
from decimal import Decimal
from uuid import UUID

from django.conf import settings
from django.db import transaction

from billing.models import MICRO, MICRO_PER_HOUR, Adjustment, AdjustmentKind, UsageEvent
from billing.periods import period_of
from billing.services.rating import latest_price_book_version, prices
from core.services.audit import record_audit
from fleet.models import Node

LEDGER = "ledger"


class CreditError(ValueError):
    pass


def _sku_for(allocation_id: UUID, node_id: UUID) -> str:
    """The SKU the tenant was metered at on that node (the ledger knows; no control-plane read)."""
    sku = (UsageEvent.objects.using(LEDGER).filter(allocation_id=allocation_id)
           .order_by("-id").values_list("sku", flat=True).first())
    if sku is None:

        sku = Node.objects.filter(pk=node_id).values_list("node_type__slug", flat=True).first()
    if sku is None:
        raise CreditError("cannot tell the node's SKU: no metering for the allocation and no such node; pass sku=")
    return sku


@transaction.atomic(using=LEDGER)
def record_sla_credit(*, tenant_id: UUID, allocation_id: UUID, node_id: UUID, start: datetime, end: datetime,
                      gpus: int, reason: str, incident_id: UUID | str, sku: str | None = None,
                      actor: str = "system:health") -> Adjustment:
    """Append the credit for one node's provider-attributed outage window; idempotent per incident+node."""
    if end <= start:
        raise CreditError("end must be after start")
    if gpus < 1:
        raise CreditError("gpus must be at least 1")
    dedupe_key = f"sla:{incident_id}:{node_id}"
    existing = Adjustment.objects.using(LEDGER).filter(dedupe_key=dedupe_key).first()
    if existing is not None:
        return existing
    sku = sku or _sku_for(allocation_id, node_id)
    version = latest_price_book_version(on=period_of(start))
    price = prices(version).get(sku)
    if price is None:
        raise CreditError(f"no price for SKU {sku!r}")
    seconds = Decimal((end - start) // datetime.resolution) / MICRO
    quantity_micro = int(gpus * seconds * MICRO)
    factor = Decimal(settings.BILLING_SLA_CREDIT_FACTOR)
    amount = -(Decimal(quantity_micro) * price.unit_price / MICRO_PER_HOUR * factor)
    credit = Adjustment.objects.using(LEDGER).create(
        kind=AdjustmentKind.SLA_CREDIT, tenant_id=tenant_id, allocation_id=allocation_id, node_id=node_id, sku=sku,
        start=start, end=end, period=period_of(start), quantity_micro=quantity_micro, amount=amount,
        currency=price.currency, reason=f"SLA credit: {reason}"[:2000], reference=f"incident {incident_id}",
        dedupe_key=dedupe_key,
    )
    record_audit(actor=actor, action="billing.sla_credit", target=credit, reason=reason,
                 after={"tenant_id": str(tenant_id), "node_id": str(node_id), "sku": sku, "gpus": gpus,
                        "start": start.isoformat(), "end": end.isoformat(), "amount": str(credit.amount)})
    return credit
