"""SLA credits under a written policy, and operators' manual adjustments.

SLA policy (billing.models.SlaPolicy, as data; the one in force for the tenant when the
window starts): an incident earns a credit only if its attribution is one the policy counts
(default: `provider`). The window runs from the node's pull to when the allocation had its
GPUs back (the caller passes that end: a replacement placed ends it, the repair does not).
The GPUs credited are bounded by the node's and the allocation's. The window is split at
month boundaries and at price-book version changes; each piece is one append-only
Adjustment of its own month, priced at the list price in force then × the policy's
`credit_rate`. Rating caps it (billing.services.rating): at most `cap_percent` of that
allocation's charge for that month, and never more than the invoice. Each credit names the
policy it was computed under. Recording the same (incident, node) twice credits once.
"""

from datetime import datetime
from decimal import ROUND_HALF_EVEN, Decimal
from uuid import UUID

from django.db import transaction
from django.db.models import Q

from billing.models import MICRO_PER_HOUR, Adjustment, AdjustmentKind, UsageEvent
from billing.periods import format_period, next_period, period_of, period_start
from billing.selectors import policy_in_force
from billing.services.rating import PriceBook, split_by_time
from core.ids import uuid7
from core.services.audit import record_audit
from core.services.permissions import PermissionMissing, require_permission
from fleet.models import Node
from tenants.models import Allocation, AllocationNode, Tenant

LEDGER = "ledger"
MICRO_AMOUNT = Decimal("0.000001")
MAX_MANUAL_AMOUNT = Decimal("1000000.00")
METERED_SAMPLE = 200  # recent events read to bound an allocation the control plane does not know


class CreditError(ValueError):
    """A credit or adjustment that must not be recorded; `code` is the API's problem code."""

    def __init__(self, detail: str, code: str = "invalid_credit"):
        super().__init__(detail)
        self.code = code
        self.detail = detail


class NotPermitted(PermissionError):
    pass


def require_operator(by, action: str) -> str:
    """The one permission check for billing corrections, the API's own (core.services.permissions):
    an active staff account with the action's permission (`adjustment.create` needs
    billing.add_adjustment, `credit_note.create` billing.add_creditnote, `invoice.reissue`
    billing.change_invoice), whichever code path calls the service. Returns the actor."""
    if not getattr(by, "is_authenticated", False):
        raise NotPermitted("Only operators may correct invoices or record adjustments.")
    # an operator token's principal (the API) answers for the user behind the token, as IsOperator does
    subject = by.user if getattr(by, "kind", None) == "operator" and hasattr(by, "user") else by
    try:
        require_permission(subject, action)
    except PermissionMissing as missing:
        raise NotPermitted(str(missing)) from None
    actor = getattr(by, "actor", None)
    return actor if isinstance(actor, str) else f"user:{by.get_username()}"


def _sku_for(allocation_id: UUID, node: Node | None) -> str:
    """The SKU the tenant was metered at (the ledger knows), else the node's type."""
    sku = (
        UsageEvent.objects.using(LEDGER)
        .filter(allocation_id=allocation_id)
        .order_by("-id")
        .values_list("sku", flat=True)
        .first()
    )
    if sku is None and node is not None:
        sku = node.node_type.slug
    if sku is None:
        raise CreditError("cannot tell the node's SKU: no metering for the allocation and no such node; pass sku=")
    return sku


def _gpu_bound(allocation_id: UUID, node_id: UUID) -> tuple[int, Node | None]:
    """The most GPUs one node of this allocation can have lost: min(node's, allocation's) from
    the control plane; for an allocation it does not know, the most GPUs the ledger metered
    for it in one event. Neither: refused."""
    node = Node.objects.select_related("node_type").filter(pk=node_id).first()
    allocation = Allocation.objects.select_related("instance_type").filter(pk=allocation_id).first()
    if allocation is not None:
        allocation_gpus = allocation.node_count * allocation.instance_type.gpus_per_node
        node_gpus = node.node_type.gpus_per_node if node is not None else allocation.instance_type.gpus_per_node
        return min(allocation_gpus, node_gpus), node
    metered = (
        UsageEvent.objects.using(LEDGER)
        .filter(allocation_id=allocation_id)
        .order_by("-id")
        .values_list("quantity_micro", "start", "end")[:METERED_SAMPLE]
    )
    bound = max((-(-micro // ((end - start) // datetime.resolution)) for micro, start, end in metered), default=0)
    if node is not None:
        bound = min(bound, node.node_type.gpus_per_node)
    if bound < 1:
        raise CreditError(
            "unknown allocation: neither the control plane nor the ledger knows how many GPUs it "
            "had, so no credit can be bounded",
            code="unknown_allocation",
        )
    return bound, node


def _cuts(start: datetime, end: datetime, book: PriceBook) -> list[datetime]:
    cuts, month = [], next_period(period_of(start))
    while period_start(month) < end:
        cuts.append(period_start(month))
        month = next_period(month)
    return sorted(set(cuts) | {t for t in book.change_times if start < t < end})


def _within_membership(allocation_id: UUID, node_id: UUID, start: datetime, end: datetime) -> list[tuple]:
    """[start, end) clipped to the allocation's membership of the node: no earlier than the node
    joined the allocation, no later than the allocation ended (a credit for months after it was
    released would credit GPUs the tenant no longer had). The pulled node itself leaves at the
    pull, so its own membership's end does not bound the window; the allocation's end does.
    What the control plane does not know (an allocation it never had) leaves the window as given."""
    joined = (
        AllocationNode.objects.filter(allocation_id=allocation_id, node_id=node_id)
        .order_by("started_at")
        .values_list("started_at", flat=True)
        .first()
    )
    ended = Allocation.objects.filter(pk=allocation_id).values_list("ended_at", flat=True).first()
    lo = max(start, joined) if joined is not None else start
    hi = min(end, ended) if ended is not None else end
    return [(lo, hi)] if lo < hi else []


@transaction.atomic(using=LEDGER)
def record_sla_credit(
    *,
    tenant_id: UUID,
    allocation_id: UUID,
    node_id: UUID,
    start: datetime,
    end: datetime,
    gpus: int,
    reason: str,
    incident_id: UUID | str,
    attribution: str = "provider",
    sku: str | None = None,
    actor: str = "system:health",
) -> list[Adjustment]:
    """Append the credit pieces for one node's outage window; [] when the policy does not count
    the incident's attribution. Idempotent per incident and node."""
    if end <= start:
        raise CreditError("end must be after start")
    if not isinstance(gpus, int) or gpus < 1:
        raise CreditError("gpus must be a whole number ≥ 1")
    prefix = f"sla:{incident_id}:{node_id}"
    existing = list(
        Adjustment.objects.using(LEDGER)
        .filter(Q(dedupe_key=prefix) | Q(dedupe_key__startswith=f"{prefix}:"))
        .order_by("id")
    )
    if existing:
        return existing
    policy = policy_in_force(tenant_id, start)
    if policy is None:
        raise CreditError(
            "no SLA policy is in force for this tenant; add one (billing.SlaPolicy)", code="no_sla_policy"
        )
    if attribution not in policy.counted_attributions:
        return []
    bound, node = _gpu_bound(allocation_id, node_id)
    if gpus > bound:
        raise CreditError(
            f"{gpus} GPUs is more than the allocation had on that node ({bound})", code="gpus_exceed_allocation"
        )
    sku = sku or _sku_for(allocation_id, node)
    book = PriceBook.load()
    credits = []
    windows = _within_membership(allocation_id, node_id, start, end)
    pieces = [piece for a, b in windows for piece in split_by_time(a, b, 0, _cuts(a, b, book))]
    if not pieces:
        return []
    for lo, hi, _ in pieces:
        price = book.price_at(sku, lo)
        if price is None:
            raise CreditError(f"no price for SKU {sku!r} at {lo:%Y-%m-%d %H:%M} UTC")
        quantity_micro = gpus * ((hi - lo) // datetime.resolution)
        amount = -(Decimal(quantity_micro) * price.unit_price * policy.credit_rate / MICRO_PER_HOUR).quantize(
            MICRO_AMOUNT, rounding=ROUND_HALF_EVEN
        )
        credits.append(
            Adjustment.objects.using(LEDGER).create(
                kind=AdjustmentKind.SLA_CREDIT,
                tenant_id=tenant_id,
                allocation_id=allocation_id,
                node_id=node_id,
                sku=sku,
                start=lo,
                end=hi,
                period=period_of(lo),
                quantity_micro=quantity_micro,
                amount=amount,
                currency=price.currency,
                gpus=gpus,
                unit_price=price.unit_price,
                price_version=price.version,
                rate=policy.credit_rate,
                sla_policy=policy,
                actor=actor,
                reason=f"SLA credit: {reason}"[:2000],
                reference=f"incident {incident_id}",
                dedupe_key=f"{prefix}:{lo.isoformat()}",
            )
        )
    record_audit(
        actor=actor,
        action="billing.sla_credit",
        target=credits[0],
        reason=reason,
        after={
            "tenant_id": str(tenant_id),
            "node_id": str(node_id),
            "sku": sku,
            "gpus": gpus,
            "start": start.isoformat(),
            "end": end.isoformat(),
            "policy": f"{policy.key} v{policy.version}",
            "pieces": [{"period": format_period(c.period), "amount": str(c.amount)} for c in credits],
        },
    )
    return credits


def _money(value, field: str) -> Decimal:
    try:
        amount = Decimal(str(value))
    except ArithmeticError:
        raise CreditError(f'{field} must be a decimal amount, e.g. "-25.00"', code="validation_error") from None
    if not amount.is_finite() or amount != amount.quantize(Decimal("0.01")):
        raise CreditError(f"{field} must be a finite amount with at most 2 decimal places", code="validation_error")
    return amount


@transaction.atomic(using=LEDGER)
def record_manual_adjustment(
    *, by, tenant_id: UUID, period, amount, reason: str, reference: str = "", key: str = ""
) -> Adjustment:
    """An operator's charge (+) or credit (−) on the tenant's invoice for `period` (or, once that
    is finalized, on the next one as a line naming the month). Needs a reason; audited."""
    actor = require_operator(by, "adjustment.create")
    amount = _money(amount, "amount")
    if amount == 0 or abs(amount) > MAX_MANUAL_AMOUNT:
        raise CreditError(
            f"amount must be non-zero and at most {MAX_MANUAL_AMOUNT} either way", code="validation_error"
        )
    reason = (reason or "").strip()
    if not reason or len(reason) > 2000:
        raise CreditError("give a reason (1 to 2000 characters): it is printed on the invoice", code="validation_error")
    if not Tenant.objects.filter(pk=tenant_id).exists():
        raise CreditError(f"no tenant {tenant_id}: an adjustment is for a tenant that exists", code="validation_error")
    if len(reference) > 200 or len(key) > 100:
        raise CreditError("reference is at most 200 characters, key at most 100", code="validation_error")
    dedupe_key = f"manual:{tenant_id}:{key or uuid7().hex}"
    existing = Adjustment.objects.using(LEDGER).filter(dedupe_key=dedupe_key).first()
    if existing is not None:  # the same request retried
        return existing
    adjustment = Adjustment.objects.using(LEDGER).create(
        kind=AdjustmentKind.MANUAL,
        tenant_id=tenant_id,
        period=period,
        amount=amount,
        reason=reason,
        reference=reference,
        actor=actor,
        dedupe_key=dedupe_key,
    )
    record_audit(
        actor=actor,
        action="billing.manual_adjustment",
        target=adjustment,
        reason=reason,
        after={"tenant_id": str(tenant_id), "period": format_period(period), "amount": str(amount)},
    )
    return adjustment
