"""Reads of the billing ledger for the API, portal and console."""
from collections import defaultdict
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal

from django.db.models import Count, Prefetch, Sum
from django.db.models.functions import TruncDate
from django.utils import timezone

from billing.models import BillingRun, Invoice, InvoiceLine, Unit, UsageEvent
from billing.services.rating import (
    Price,
    gpu_hours,
    latest_price_book_version,
    prices,
    usage_amount,
)

LEDGER = "ledger"


@dataclass(frozen=True)
class UsageRow:
    sku: str
    quantity: Decimal  # GPU-hours
    unit: str
    amount: Decimal
    currency: str


def usage_by_sku(*, tenant_id, start: datetime, end: datetime) -> list[UsageRow]:
    """Usage metered in [start, end) (by event start), priced at the current price book.

    Draft pricing for display only; invoices are what is charged."""
    price_of = prices(latest_price_book_version())
    rows = (UsageEvent.objects.using(LEDGER).filter(tenant_id=tenant_id, start__gte=start, start__lt=end)
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
    rows = (UsageEvent.objects.using(LEDGER).filter(tenant_id=tenant_id, start__gte=start, start__lt=end)
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
