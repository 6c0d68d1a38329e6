"""Rating: a pure function of (ledger rows up to a watermark, price-book version).

`rate_period` reads the ledger (two grouped SQL aggregates and the period's adjustments)
and returns invoice lines; it writes nothing. Quantities are summed in SQL as exact
integers (GPU-microseconds); money is Decimal, rounded half-even to the cent once per
invoice line. Intervals were split at month boundaries on ingest (billing.services.ingest),
so a period is a plain `period = P` filter.

What a run for period P bills, given its watermarks W (events) and AW (adjustments), and
the watermarks W0/AW0 of the last finalized run of an earlier period F:
- usage of P with id ≤ W;
- late usage: rows of periods ≤ F that arrived after F was finalized (W0 < id ≤ W), as
  `late_usage` lines (periods finalize in order, so each such row is billed exactly once);
- adjustments (SLA credits, manual) of P with id ≤ AW, and late ones of periods ≤ F with AW0 < id ≤ AW.
"""
import hashlib
import json
from collections import defaultdict
from dataclasses import asdict, dataclass
from datetime import date
from decimal import ROUND_HALF_EVEN, Decimal

from django.db.models import Q, Sum

from billing.models import (
    MICRO_PER_HOUR,
    Adjustment,
    AdjustmentKind,
    LineKind,
    PriceBookEntry,
    Unit,
    UsageEvent,
)
from billing.periods import format_period, period_start

LEDGER = "ledger"
CENT = Decimal("0.01")
HOUR_PLACES = Decimal("0.000001")


class UnpricedSku(Exception):
    pass


@dataclass(frozen=True)
class Price:
    sku: str
    unit_price: Decimal
    currency: str


@dataclass(frozen=True)
class RatedLine:
    kind: str
    sku: str
    description: str
    usage_period: date
    quantity: Decimal  # GPU-hours (6 places)
    unit: str
    unit_price: Decimal | None
    amount: Decimal  # cents, half-even
    reference: str = ""


@dataclass(frozen=True)
class Cutoff:
    """What a run may see: watermarks now, and those of the last finalized earlier period."""

    watermark: int
    adjustment_watermark: int
    last_final_period: date | None = None
    prior_watermark: int = 0
    prior_adjustment_watermark: int = 0


def latest_price_book_version(*, on: date | None = None) -> int:
    entries = PriceBookEntry.objects.using(LEDGER)
    if on is not None:

        dated = entries.filter(effective_from__lte=period_start(on))
        if dated.exists():
            entries = dated
    return entries.order_by("-version").values_list("version", flat=True).first() or 0


def prices(version: int) -> dict[str, Price]:
    """Each SKU's price in `version`: its row with the highest version ≤ `version`."""
    out: dict[str, Price] = {}
    for entry in PriceBookEntry.objects.using(LEDGER).filter(version__lte=version).order_by("version"):
        out[entry.sku] = Price(entry.sku, entry.unit_price, entry.currency)
    return out


def usage_amount(quantity_micro: int, unit_price: Decimal) -> Decimal:
    return (Decimal(quantity_micro) * unit_price / MICRO_PER_HOUR).quantize(CENT, rounding=ROUND_HALF_EVEN)


def gpu_hours(quantity_micro: int) -> Decimal:
    return (Decimal(quantity_micro) / MICRO_PER_HOUR).quantize(HOUR_PLACES, rounding=ROUND_HALF_EVEN)


def _usage_filter(period: date, cut: Cutoff) -> Q:
    current = Q(period=period, id__lte=cut.watermark)
    if cut.last_final_period is None:
        return current
    late = Q(period__lte=cut.last_final_period, id__gt=cut.prior_watermark, id__lte=cut.watermark)
    return current | late


def _adjustment_filter(period: date, cut: Cutoff) -> Q:
    current = Q(period=period, id__lte=cut.adjustment_watermark)
    if cut.last_final_period is None:
        return current
    late = Q(period__lte=cut.last_final_period, id__gt=cut.prior_adjustment_watermark,
             id__lte=cut.adjustment_watermark)
    return current | late


def rate_period(*, period: date, cutoff: Cutoff, price_book_version: int,
                tenant_ids: list | None = None) -> dict:
    """{tenant_id: [RatedLine, ...]} for every tenant with something to bill in `period`."""
    price_of = prices(price_book_version)
    usage = UsageEvent.objects.using(LEDGER).filter(_usage_filter(period, cutoff))
    adjustments = Adjustment.objects.using(LEDGER).filter(_adjustment_filter(period, cutoff))
    if tenant_ids is not None:
        usage, adjustments = usage.filter(tenant_id__in=tenant_ids), adjustments.filter(tenant_id__in=tenant_ids)
    grouped = (usage.values("tenant_id", "sku", "period").annotate(micro=Sum("quantity_micro"))
               .order_by("tenant_id", "period", "sku"))
    lines: dict = defaultdict(list)
    for row in grouped:
        price = price_of.get(row["sku"])
        if price is None:
            raise UnpricedSku(f"no price for SKU {row['sku']!r} in price book v{price_book_version}")
        late = row["period"] != period
        lines[row["tenant_id"]].append(RatedLine(
            kind=LineKind.LATE_USAGE if late else LineKind.USAGE,
            sku=row["sku"],
            description=(f"{row['sku']} GPU-hours" + (f" (late usage for {format_period(row['period'])})" if late else "")),
            usage_period=row["period"],
            quantity=gpu_hours(row["micro"]),
            unit=Unit.GPU_HOUR,
            unit_price=price.unit_price,
            amount=usage_amount(row["micro"], price.unit_price),
        ))
    for adj in adjustments.order_by("tenant_id", "id"):
        kind = {AdjustmentKind.SLA_CREDIT: LineKind.SLA_CREDIT}.get(adj.kind, LineKind.MANUAL)
        lines[adj.tenant_id].append(RatedLine(
            kind=kind, sku=adj.sku, description=adj.reason[:300], usage_period=adj.period,
            quantity=gpu_hours(adj.quantity_micro), unit=Unit.GPU_HOUR, unit_price=None,
            amount=adj.amount.quantize(CENT, rounding=ROUND_HALF_EVEN), reference=adj.reference or str(adj.public_id),
        ))
    return dict(lines)


def output_hash(*, period: date, price_book_version: int, rated: dict) -> str:
    """SHA-256 of the rated result in canonical form: equal results hash equally."""
    canonical = {
        "period": format_period(period),
        "price_book_version": price_book_version,
        "invoices": {str(tenant): [{k: str(v) for k, v in asdict(line).items()} for line in rated[tenant]]
                     for tenant in sorted(rated, key=str)},
    }
    return hashlib.sha256(json.dumps(canonical, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
