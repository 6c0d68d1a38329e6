"""Reads of the billing ledger for the API, portal and console."""
from collections import defaultdict
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal

from django.db.models import Count, Prefetch, Sum
from django.db.models.functions import TruncDate
from django.utils import timezone

from billing.grants import MeteringGrant, grant_window, sign_grant
from billing.models import (
    BILLABLE_USAGE,
    BillingRun,
    DisputeStatus,
    Invoice,
    InvoiceLine,
    RejectedMeterEvent,
    Unit,
    UsageDispute,
    UsageEvent,
)
from billing.services.rating import (
    Price,
    gpu_hours,
    latest_price_book_version,
    prices,
    usage_amount,
)
from tenants.models import AllocationNode

LEDGER = "ledger"


@dataclass(frozen=True)
class UsageRow:
    sku: str
    quantity: Decimal  # GPU-hours
    unit: str
    amount: Decimal
    currency: str


def usage_by_sku(*, tenant_id, start: datetime, end: datetime) -> list[UsageRow]:
    """Usage metered in [start, end) (by event start), priced at the current price book; usage
    held as disputed is left out until it is accepted.

    Draft pricing for display only; invoices are what is charged."""
    price_of = prices(latest_price_book_version())
    rows = (UsageEvent.objects.using(LEDGER).filter(BILLABLE_USAGE, tenant_id=tenant_id, start__gte=start, start__lt=end)
            .values("sku").annotate(micro=Sum("quantity_micro")).order_by("sku"))
    out = []
    for row in rows:
        price = price_of.get(row["sku"])
        out.append(UsageRow(sku=row["sku"], quantity=gpu_hours(row["micro"]), unit=Unit.GPU_HOUR,
                            amount=usage_amount(row["micro"], price.unit_price) if price else Decimal("0.00"),
                            currency=price.currency if price else "USD"))
    return out


def daily_gpu_hours(*, tenant_id, start: datetime, end: datetime) -> dict[str, dict[date, Decimal]]:
    """{sku: {day: GPU-hours}} by event start day (UTC), for the usage chart."""
    rows = (UsageEvent.objects.using(LEDGER).filter(BILLABLE_USAGE, tenant_id=tenant_id, start__gte=start, start__lt=end)
            .annotate(day=TruncDate("start")).values("sku", "day").annotate(micro=Sum("quantity_micro"))
            .order_by("sku", "day"))
    out: dict[str, dict[date, Decimal]] = defaultdict(dict)
    for row in rows:
        out[row["sku"]][row["day"]] = gpu_hours(row["micro"])
    return dict(out)


def invoices_for_tenant(tenant_id):
    """A tenant's invoices with their lines (two queries however many there are)."""
    return (Invoice.objects.using(LEDGER).filter(tenant_id=tenant_id)
            .prefetch_related(Prefetch("lines", queryset=InvoiceLine.objects.using(LEDGER).order_by("position"))))


def invoice_for_tenant(*, tenant_id, invoice_id) -> Invoice | None:
    return invoices_for_tenant(tenant_id).filter(pk=invoice_id).first()


def recent_runs(limit: int = 20) -> list[BillingRun]:
    return list(BillingRun.objects.using(LEDGER).order_by("-started_at")[:limit])


def invoice_totals_by_tenant() -> list[dict]:
    """Per tenant and status: invoice count and total (the console's billing page)."""
    return list(Invoice.objects.using(LEDGER).values("tenant_id", "status", "currency")
                .annotate(count=Count("id"), total=Sum("total")).order_by("tenant_id", "status"))


def default_usage_window(now: datetime) -> tuple[datetime, datetime]:
    """This month so far."""
    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    return start, now + timedelta(seconds=1)


def current_prices() -> dict[str, "Price"]:
    """sku → today's price (unit price per GPU-hour and currency) from the latest price book."""
    return prices(latest_price_book_version(on=timezone.now().date()))


DISPUTES_SHOWN = 200
REJECTIONS_SHOWN = 200


def open_disputes(limit: int = DISPUTES_SHOWN) -> list[UsageDispute]:
    """Oldest first (two queries however many: the disputes with their usage rows)."""
    return list(UsageDispute.objects.using(LEDGER).filter(status=DisputeStatus.OPEN).select_related("usage_event")
                .order_by("id")[:limit])


def resolved_disputes(limit: int = 50) -> list[UsageDispute]:
    return list(UsageDispute.objects.using(LEDGER).exclude(status=DisputeStatus.OPEN).select_related("usage_event")
                .order_by("-resolved_at")[:limit])


def dispute_by_public_id(public_id) -> UsageDispute | None:
    return UsageDispute.objects.using(LEDGER).select_related("usage_event").filter(public_id=public_id).first()


def recent_rejections(limit: int = REJECTIONS_SHOWN) -> list[RejectedMeterEvent]:
    """Meter events ingest refused, newest first."""
    return list(RejectedMeterEvent.objects.using(LEDGER).order_by("-id")[:limit])


def dispute_counts() -> dict[str, int]:
    rows = UsageDispute.objects.using(LEDGER).values("status").annotate(n=Count("id")).order_by()
    return {row["status"]: row["n"] for row in rows}


def metering_grants_for_node(node, *, now: datetime) -> list[dict]:
    """The signed grants a node's agent attaches to its meter events: one per live allocation
    membership of the node, from the membership's start to a few hours ahead (renewed on every
    desired-state poll while the membership lives; none once it ends). One query."""
    rows = (AllocationNode.objects.filter(node=node, ended_at__isnull=True)
            .values_list("allocation_id", "allocation__tenant_id", "allocation__instance_type__slug",
                         "allocation__instance_type__gpus_per_node", "started_at").order_by("started_at"))
    grants = []
    for allocation_id, tenant_id, sku, gpus, started_at in rows:
        valid_from, valid_until = grant_window(started_at=started_at, now=now)
        grant = MeteringGrant(node_id=node.pk, tenant_id=tenant_id, allocation_id=allocation_id, sku=sku, gpus=gpus,
                              valid_from=valid_from, valid_until=valid_until)
        grants.append({"grant": sign_grant(grant), "allocation_id": str(allocation_id), "tenant_id": str(tenant_id),
                       "sku": sku, "gpus": gpus, "valid_from": valid_from, "valid_until": valid_until})
    return grants
