"""The pass-through energy line: when the price book prices energy, an invoice charges its
tenant's facility kWh for the month at that price; without an energy price, energy stays
informational (shown next to the invoice, not on it).

Why facility kWh and not IT kWh: the site pays its utility for what the grid delivers to the
whole facility, the nodes' wall energy plus cooling, power conversion and the rest (IT kWh ×
the site's PUE). A pass-through hands on the tenant's share of that bill, so the price book's
energy price is the utility's per-kWh price and the quantity is facility kWh; priced per IT kWh
the operator would have to fold each site's PUE into the price, and two sites with different
PUEs could not share one price row.

The kWh come from the control plane's hourly energy (tenants.energy), not from the ledger (see
docs/power.md for why). Energy is metered by the hour, so the hour is the unit that is priced:
an hour's energy is priced by the price-book version in force at the hour's start. A price
change inside the month splits the line at the first whole hour at or after the change (a
change at 12:30 leaves the 12:00 hour at the old price and starts the new one at 13:00), so
each hour is on exactly one line. Quantities are rounded to 0.001 kWh as the usage report shows
them; amount = quantity × unit price, half-even to the cent.
"""

from datetime import date, datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal

from billing.models import LineKind, Unit
from billing.periods import format_period, period_end, period_start
from billing.services.rating import CENT, PriceBook, RatedLine
from tenants.energy import allocation_energy, tenants_with_energy

ENERGY_SKU = "energy-facility-kwh"  # the price book's energy row: price per facility kWh
KWH_PLACES = Decimal("0.001")
HOUR = timedelta(hours=1)


def hour_ceiling(moment: datetime) -> datetime:
    """The first whole hour at or after `moment` (the first hour a price change applies to)."""
    floor = moment.replace(minute=0, second=0, microsecond=0)
    return floor if floor == moment else floor + HOUR


def hour_spans(book: PriceBook, start: datetime, end: datetime) -> list[tuple[datetime, datetime, int | None]]:
    """[start, end) (whole hours) cut into (lo, hi, version) by whole hours: each hour belongs to
    the span of the version in force at its start. Two changes inside one hour leave the hour
    with the version in force at its start; the empty span between is dropped."""
    spans = [(hour_ceiling(lo), hour_ceiling(hi), version) for lo, hi, version in book.spans(start, end)]
    return [(lo, hi, version) for lo, hi, version in spans if lo < hi]


def energy_line_amount(facility_kwh: Decimal, unit_price: Decimal) -> Decimal:
    return (facility_kwh * unit_price).quantize(CENT, rounding=ROUND_HALF_EVEN)


def energy_lines(*, period: date, book: PriceBook, tenant_ids=None) -> dict:
    """{tenant_id: [RatedLine]} for the month's energy, one line per price span that has an
    energy price; {} when the price book has no energy price in force during the month."""
    start, end = period_start(period), period_end(period)
    spans = [
        (lo, hi, price)
        for lo, hi, version in hour_spans(book, start, end)
        if version is not None and (price := book.price(ENERGY_SKU, version)) is not None
    ]
    if not spans:
        return {}
    tenants = tenants_with_energy(start=start, end=end)
    if tenant_ids is not None:
        wanted = {str(t) for t in tenant_ids}
        tenants = [t for t in tenants if str(t) in wanted]
    out: dict = {}
    for tenant_id in tenants:
        for lo, hi, price in spans:
            rows = allocation_energy(tenant_id=tenant_id, start=lo, end=hi)
            facility = sum((r.facility_kwh for r in rows), Decimal("0")).quantize(KWH_PLACES)
            if not facility:
                continue
            it = sum((r.it_kwh for r in rows), Decimal("0")).quantize(KWH_PLACES)
            measured = sum((r.measured_kwh for r in rows), Decimal("0")).quantize(KWH_PLACES)
            estimated = sum((r.estimated_kwh for r in rows), Decimal("0")).quantize(KWH_PLACES)
            # say where the kWh come from: measured by the nodes' meters, or estimated
            if estimated and measured:
                basis = f"IT kWh {measured} measured by the nodes' energy counters, {estimated} estimated (GPU counters + host share)"
            elif estimated:
                basis = "IT kWh estimated from GPU counters + a host share (no node energy counter)"
            else:
                basis = "kWh from the nodes' energy counters"
            out.setdefault(tenant_id, []).append(
                RatedLine(
                    kind=LineKind.ENERGY,
                    sku=ENERGY_SKU,
                    description=(
                        f"Energy {format_period(period)}: {facility} facility kWh "
                        f"({it} IT kWh × site PUE), pass-through"
                    )[:300],
                    usage_period=period,
                    quantity=facility,
                    unit=Unit.KWH,
                    unit_price=price.unit_price,
                    amount=energy_line_amount(facility, price.unit_price),
                    price_version=price.version,
                    start=lo,
                    end=hi,
                    note=f"{len(rows)} allocation(s); {basis}"[:300],
                )
            )
    return out


def with_energy_lines(rated: dict, *, period: date, book: PriceBook, tenant_ids=None) -> dict:
    """`rated` ({tenant_id: [RatedLine]}) with each tenant's energy lines appended (a tenant
    with energy but no GPU usage gets an invoice of its energy alone); `rated` itself when
    there is no energy line to add."""
    energy = energy_lines(period=period, book=book, tenant_ids=tenant_ids)
    if not energy:  # no energy price in force: nothing to add (and no 10,000 list copies)
        return rated
    out = {tenant: list(lines) for tenant, lines in rated.items()}
    by_key = {str(t): t for t in out}
    for tenant_id, lines in energy.items():
        out.setdefault(by_key.get(str(tenant_id), tenant_id), []).extend(lines)
    return out
