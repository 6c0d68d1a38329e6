"""Rating: a pure function of (ledger rows in a run's scope, the price book).

**Price by time of use.** The price-book version in force at time t is the highest version
whose `effective_from` ≤ t; a SKU's price in version V is its row with the highest version
≤ V. Each usage interval is priced by the version in force while it ran: an interval that
crosses a version boundary is split there (its quantity apportioned by time, the remainder
on the last piece, as ingest does at month boundaries). Lines are grouped by
period × SKU × price row, and carry the row's version and the time range it was in force.

**What a run for period P bills** (its scope), given its watermarks W (events) and AW
(adjustments), the set F of periods finalized before it, and the watermarks W0/AW0 of the
last finalized run before it (of any period):
- usage of P with id ≤ W;
- late usage: rows of periods in F with W0 < id ≤ W, as `late_usage` lines naming their
  month (every finalized run bills exactly the rows above the previous finalized run's
  watermark, so each row lands on exactly one finalized invoice whatever the order in which
  rows arrive and periods are finalized);
- adjustments (SLA credits, manual) of P with id ≤ AW, and late ones of F with AW0 < id ≤ AW.

**SLA credits are capped here**, where the charge they refer to is known: the credits of one
allocation for one month never exceed the policy's `cap_percent` of that allocation's charge
for that month (earlier credits of the pair use up the cap first, in ledger order), and the
credits on one invoice never exceed its charges.

Quantities are summed in SQL as exact integers (GPU-microseconds); money is Decimal, rounded
half-even to the cent once per invoice line: amount = GPU-µs × unit price × rate ÷ 3.6e9.

Disputed usage is never rated unless an operator accepted it (billing.services.disputes);
an accepted dispute after its month was finalized is billed once as a late-usage adjustment.
"""

import hashlib
import json
from bisect import bisect_right
from collections import defaultdict
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal
from json.encoder import encode_basestring_ascii
from operator import itemgetter
from typing import NamedTuple

from django.db.models import Case, Count, IntegerField, Q, Sum, Value, When

from billing.models import (
    MICRO_PER_HOUR,
    Adjustment,
    AdjustmentKind,
    DisputeStatus,
    LineKind,
    PriceBookEntry,
    SlaPolicy,
    Unit,
    UsageDispute,
    UsageEvent,
    UsageSpan,
)
from billing.periods import format_period, period_end, period_start
from core.expressions import EpochMicros

LEDGER = "ledger"
CENT = Decimal("0.01")
HOUR_PLACES = Decimal("0.000001")
_US = timedelta(microseconds=1)


class UnpricedSku(Exception):
    pass


@dataclass(frozen=True)
class Price:
    sku: str
    unit_price: Decimal
    currency: str
    version: int = 0  # the price-book version of the row this price comes from


class PriceBook:
    """Every price-book row (one query), answering "which price was in force at t"."""

    def __init__(self, entries):
        self._rows: dict[str, list[tuple[int, Price]]] = defaultdict(list)
        versions: dict[int, datetime] = {}
        for entry in sorted(entries, key=lambda e: e.version):
            self._rows[entry.sku].append(
                (entry.version, Price(entry.sku, entry.unit_price, entry.currency, entry.version))
            )
            versions[entry.version] = min(versions.get(entry.version, entry.effective_from), entry.effective_from)
        # Change points: (moment, version in force from then on). The in-force version only
        # ever rises with time (highest version already effective), so the points are monotonic.
        self.change_times: list[datetime] = []
        self.change_versions: list[int] = []
        for version, since in sorted(versions.items(), key=lambda item: (item[1], item[0])):
            if self.change_versions and version <= self.change_versions[-1]:
                continue
            if self.change_times and self.change_times[-1] == since:
                self.change_versions[-1] = version
                continue
            self.change_times.append(since)
            self.change_versions.append(version)

    @classmethod
    def load(cls, *, as_of: datetime | None = None) -> "PriceBook":
        entries = PriceBookEntry.objects.using(LEDGER).all()
        if as_of is not None:
            entries = entries.filter(created_at__lte=as_of)
        return cls(list(entries))

    def version_at(self, moment: datetime) -> int | None:
        index = bisect_right(self.change_times, moment) - 1
        return self.change_versions[index] if index >= 0 else None

    def price(self, sku: str, version: int) -> Price | None:
        found = None
        for row_version, price in self._rows.get(sku, ()):
            if row_version > version:
                break
            found = price
        return found

    def price_at(self, sku: str, moment: datetime) -> Price | None:
        version = self.version_at(moment)
        return None if version is None else self.price(sku, version)

    def prices_at(self, moment: datetime) -> dict[str, Price]:
        version = self.version_at(moment)
        if version is None:
            return {}
        return {sku: price for sku in self._rows if (price := self.price(sku, version)) is not None}

    def spans(self, start: datetime, end: datetime) -> list[tuple[datetime, datetime, int | None]]:
        """[start, end) cut at every version change inside it: (lo, hi, version in force or None)."""
        cuts = [t for t in self.change_times if start < t < end]
        bounds = [start, *cuts, end]
        return [(lo, hi, self.version_at(lo)) for lo, hi in zip(bounds, bounds[1:], strict=False)]

    def in_force(self, sku: str, row_version: int, start: datetime, end: datetime) -> tuple[datetime, datetime]:
        """The part of [start, end) during which `sku` was charged at its row of `row_version`."""
        covered = [
            (lo, hi)
            for lo, hi, version in self.spans(start, end)
            if version is not None and (p := self.price(sku, version)) is not None and p.version == row_version
        ]
        return (covered[0][0], covered[-1][1]) if covered else (start, end)


def split_by_time(start: datetime, end: datetime, quantity_micro: int, cuts: list[datetime]) -> list[tuple]:
    """[start, end) cut at `cuts`; quantity apportioned by time, the remainder on the last piece
    so the pieces always sum to exactly the original quantity."""
    bounds = [start, *[c for c in cuts if start < c < end], end]
    if len(bounds) == 2:
        return [(start, end, quantity_micro)]
    total = (end - start) // _US
    pieces, assigned = [], 0
    for i, (lo, hi) in enumerate(zip(bounds, bounds[1:], strict=False)):
        last = i == len(bounds) - 2
        share = quantity_micro - assigned if last else quantity_micro * ((hi - lo) // _US) // total
        assigned += share
        pieces.append((lo, hi, share))
    return pieces


# (tenant_id, allocation_id, period, sku, version in force) → GPU-microseconds
Buckets = dict[tuple, int]


def _unpriced(sku: str) -> UnpricedSku:
    return UnpricedSku(f"usage of {sku!r} before the first price-book version took effect")


def grouped_usage(usage, book: PriceBook, *, periods=None, group: tuple[str, ...]):
    """Rows `(*group values, version in force, GPU-µs, pieces)` of a usage queryset, one or more
    per group (pieces of one group under the same version are not merged; callers sum them).
    `pieces` counts the usage rows (or, for a row split at a version change, its parts) summed.
    `group` names `period` and `sku`.

    Rows never cross a month (ingest splits them), so only version changes strictly inside
    one of the months involved (`periods`; read from the rows when not given) can split a
    row. Months without one are priced per month: a plain grouped SUM. Otherwise rows inside
    one version's span are summed in SQL by span, and the few rows straddling a change are
    read and split in Python.

    `periods`, when given, holds every month of the rows. When it is one month, the SQL leaves
    it out of the grouping (the rows are filtered to it) and each row gets it back here: a
    run's scan before any month is finalized groups by tenant and SKU alone, as the raw
    aggregate of the month does."""
    if periods is None:
        periods = set(usage.order_by().values_list("period", flat=True).distinct())
    cuts = sorted({t for t in book.change_times for p in periods if period_start(p) < t < period_end(p)})
    at_period, at_sku = group.index("period"), group.index("sku")
    width = len(group)
    month = next(iter(periods)) if len(periods) == 1 else None
    if month is not None:
        usage = usage.filter(period=month)
    keys = group if month is None else tuple(name for name in group if name != "period")

    def with_month(rows):
        """SQL rows grouped by `keys`, as rows grouped by `group`."""
        if month is None:
            return rows
        return ((*row[:at_period], month, *row[at_period:]) for row in rows)

    if not cuts:
        version_of: dict = {}  # period → version in force at its start (one bisect per month)
        for row in with_month(usage.values_list(*keys).annotate(micro=Sum("quantity_micro"), n=Count("id")).order_by()):
            period = row[at_period]
            if period not in version_of:
                version_of[period] = book.version_at(period_start(period))
            version = version_of[period]
            if version is None:
                raise _unpriced(row[at_sku])
            yield (*row[:width], version, *row[width : width + 2])
        return
    straddles = Q()
    for moment in cuts:
        straddles |= Q(start__lt=moment, end__gt=moment)
    times = book.change_times
    segment = Case(
        *[When(start__gte=moment, then=Value(i)) for i, moment in reversed(list(enumerate(times)))],
        default=Value(-1),
        output_field=IntegerField(),
    )
    whole = (
        usage.exclude(straddles)
        .annotate(segment=segment)
        .values_list(*keys, "segment")
        .annotate(micro=Sum("quantity_micro"), n=Count("id"))
        .order_by()
    )
    for row in with_month(whole):
        index = row[width]
        if index < 0:
            raise _unpriced(row[at_sku])
        version = book.change_versions[index]
        yield (*row[:width], version, *row[width + 1 : width + 3])
    for *key, start, end, micro in (
        usage.filter(straddles).values_list(*group, "start", "end", "quantity_micro").order_by("id")
    ):
        for lo, _hi, share in split_by_time(start, end, micro, cuts):
            version = book.version_at(lo)
            if version is None:
                raise _unpriced(key[at_sku])
            yield (*key, version, share, 1)


def usage_buckets(usage, book: PriceBook, *, periods=None, by_allocation: bool = False) -> Buckets:
    """GPU-µs of a usage queryset by tenant, (allocation when `by_allocation`, else None),
    period, SKU and price-book version in force."""
    buckets: Buckets = defaultdict(int)
    if by_allocation:
        group = ("tenant_id", "allocation_id", "period", "sku")
        for tenant, allocation, period, sku, version, micro, _ in grouped_usage(
            usage, book, periods=periods, group=group
        ):
            buckets[(tenant, allocation, period, sku, version)] += micro
    else:
        for tenant, period, sku, version, micro, _ in grouped_usage(
            usage, book, periods=periods, group=("tenant_id", "period", "sku")
        ):
            buckets[(tenant, None, period, sku, version)] += micro
    return buckets


@dataclass
class UsageTally:
    """One scan of a run's usage rows: what rating prices.

    `buckets`: (tenant_id, None, period, sku, version) → GPU-µs of the billable rows (not
    disputed, or disputed and accepted), as `usage_buckets` gives them. The reconciliation's
    spans are not read from the rows (`run_spans`): grouping the month by allocation and node as
    well cost the 50 M benchmark's scan a third more than grouping it by tenant and SKU."""

    buckets: Buckets


_TALLY_GROUP = ("tenant_id", "period", "sku")


def tally_usage(usage, book: PriceBook, *, periods, cut: "Cutoff | None" = None) -> UsageTally:
    """The tally of `usage` (a run's scope, rows of every dispute state).

    The scan reads the rows alone, without the disputes table: joined to it, PostgreSQL
    misjudged the month's 400,000 rows as a few thousand and sorted them on disk (0.6 s against
    0.4 s hashed). Disputed rows are few; they are read again by id and taken back out: their
    GPU-µs and pieces leave the buckets (a bucket left with no piece is gone, as if never
    summed).
    """
    counts: dict = {}  # bucket → [GPU-µs, pieces]
    for tenant, period, sku, version, micro, pieces in grouped_usage(usage, book, periods=periods, group=_TALLY_GROUP):
        # setdefault: one hash of each key (a tuple hashes its UUIDs anew every time)
        count = counts.setdefault((tenant, None, period, sku, version), [0, 0])
        count[0] += micro
        count[1] += pieces
    unbillable = held_usage_ids(periods, cut or Cutoff(0, 0))
    for lo in range(0, len(unbillable), 1000):
        chunk = usage.filter(id__in=unbillable[lo : lo + 1000])
        for tenant, period, sku, version, micro, pieces in grouped_usage(
            chunk, book, periods=periods, group=_TALLY_GROUP
        ):
            key = (tenant, None, period, sku, version)
            count = counts[key]  # every held row was summed in the scan above
            count[0] -= micro
            count[1] -= pieces
            if not count[1]:
                del counts[key]
    return UsageTally({key: micro for key, (micro, _) in counts.items()})


@dataclass(frozen=True)
class PricedUsage:
    """Usage of one tenant, month, SKU and price row: the content of one usage line."""

    tenant_id: object
    period: date
    sku: str
    price: Price
    quantity_micro: int
    start: datetime
    end: datetime

    @property
    def amount(self) -> Decimal:
        return usage_amount(self.quantity_micro, self.price.unit_price)


def price_buckets(buckets: Buckets, book: PriceBook) -> list[PricedUsage]:
    """Buckets grouped by tenant × period × SKU × price row (allocations merged), sorted."""
    grouped: dict[tuple, int] = defaultdict(int)
    for (tenant, _allocation, period, sku, version), micro in buckets.items():
        price = book.price(sku, version)
        if price is None:
            raise UnpricedSku(f"no price for SKU {sku!r} in price book v{version}")
        grouped[(tenant, period, sku, price)] += micro
    out = []
    for (tenant, period, sku, price), micro in grouped.items():
        lo, hi = book.in_force(sku, price.version, period_start(period), period_end(period))
        out.append(PricedUsage(tenant, period, sku, price, micro, lo, hi))
    return sorted(out, key=lambda u: (str(u.tenant_id), u.period, u.sku, u.start))


def exact_charges(buckets: Buckets, book: PriceBook) -> dict[tuple, Decimal]:
    """(allocation_id, period) → its unrounded charge."""
    out: dict[tuple, Decimal] = defaultdict(Decimal)
    for (_tenant, allocation, period, sku, version), micro in buckets.items():
        price = book.price(sku, version)
        if price is not None:
            out[(allocation, period)] += Decimal(micro) * price.unit_price / MICRO_PER_HOUR
    return out


class RatedLine(NamedTuple):
    """One invoice line as rating produced it. A named tuple, not a dataclass: a run builds one
    per tenant and line (10,000 and more), and the writer and the output hash read it by
    position; a frozen dataclass cost several times as much to build."""

    kind: str
    sku: str
    description: str
    usage_period: date
    quantity: Decimal  # GPU-hours, 6 places, for reading
    unit: str
    unit_price: Decimal | None
    amount: Decimal  # cents, half-even
    reference: str = ""
    quantity_micro: int = 0  # exact GPU-µs the amount is computed from
    rate: Decimal = Decimal("1")
    price_version: int | None = None
    start: datetime | None = None
    end: datetime | None = None
    note: str = ""


LINE_FIELDS = RatedLine._fields
ONE = Decimal("1")


@dataclass(frozen=True)
class Cutoff:
    """A run's scope: its watermarks, the periods finalized before it, and the watermarks of
    the last finalized run before it."""

    watermark: int
    adjustment_watermark: int
    finalized_periods: frozenset = frozenset()
    prior_watermark: int = 0
    prior_adjustment_watermark: int = 0
    # The dispute decisions in scope (BillingRun.dispute_watermark / decision_watermark): None
    # reads every dispute as it is now (a live run, which holds the billing-run lock, sees that
    # anyway); a re-issue passes its original run's, so decisions taken since change nothing.
    dispute_watermark: int | None = None
    decision_watermark: int | None = None


def unbillable_as_of(dispute_rows, cut: "Cutoff") -> list[int]:
    """Usage-event ids held out of rating as of `cut`, from (usage_event_id, dispute id, status,
    decision_seq) rows: a dispute the run saw, not accepted by a decision the run saw."""
    out = []
    for usage_event_id, dispute_id, status, decision_seq in dispute_rows:
        if cut.dispute_watermark is not None and dispute_id > cut.dispute_watermark:
            continue  # opened after the run: the run did not hold it
        accepted = status == DisputeStatus.ACCEPTED and (
            cut.decision_watermark is None or decision_seq is None or decision_seq <= cut.decision_watermark
        )
        if not accepted:
            out.append(usage_event_id)
    return sorted(out)


def held_usage_ids(periods, cut: "Cutoff") -> list[int]:
    """The usage-event ids of `periods` a run with cutoff `cut` does not rate (disputes as of it)."""
    rows = (
        UsageDispute.objects.using(LEDGER)
        .filter(period__in=periods)
        .values_list("usage_event_id", "id", "status", "decision_seq")
    )
    return unbillable_as_of(rows, cut)


def latest_price_book_version(*, on: date | None = None) -> int:
    """The highest version in force at the end of month `on` (or the highest of all)."""
    book = PriceBook.load()
    if on is None:
        return max(book.change_versions, default=0)
    return book.version_at(period_end(on) - _US) or 0


def prices(version: int) -> dict[str, Price]:
    """Each SKU's price in `version`: its row with the highest version ≤ `version`."""
    book = PriceBook.load()
    return {sku: p for sku in book._rows if (p := book.price(sku, version)) is not None}


def usage_amount(quantity_micro: int, unit_price: Decimal, rate: Decimal = Decimal("1")) -> Decimal:
    return (Decimal(quantity_micro) * unit_price * rate / MICRO_PER_HOUR).quantize(CENT, rounding=ROUND_HALF_EVEN)


def gpu_hours(quantity_micro: int) -> Decimal:
    return (Decimal(quantity_micro) / MICRO_PER_HOUR).quantize(HOUR_PLACES, rounding=ROUND_HALF_EVEN)


def _late_periods(period: date, cut: Cutoff) -> list[date]:
    return sorted(p for p in cut.finalized_periods if p != period)


def usage_scope(period: date, cut: Cutoff) -> Q:
    """The usage rows a run of `period` with this cutoff reads (before the dispute filter)."""
    scope = Q(period=period, id__lte=cut.watermark)
    late = _late_periods(period, cut)
    if late:
        scope |= Q(period__in=late, id__gt=cut.prior_watermark, id__lte=cut.watermark)
    return scope


def _adjustment_filter(period: date, cut: Cutoff) -> Q:
    scope = Q(period=period, id__lte=cut.adjustment_watermark)
    late = _late_periods(period, cut)
    if late:
        scope |= Q(period__in=late, id__gt=cut.prior_adjustment_watermark, id__lte=cut.adjustment_watermark)
    return scope


def _usage_lines(buckets: Buckets, book: PriceBook, period: date) -> dict:
    """{tenant_id: [usage and late-usage RatedLine, ...]} (a defaultdict): buckets grouped by
    tenant × period × SKU × price row (allocations merged), each tenant's lines by period, SKU
    and start.

    Everything but the quantity and the amount is the same for every tenant billed at one
    price row in one month (description, price, the time range the row was in force): it is
    built once per (month, SKU, row) as a "head", and tenants' pieces refer to it by number."""
    heads: list = []  # (sort key, the line's shared fields) per (usage period, sku, price row)
    head_of_row: dict = {}  # (usage period, sku, row version) → index in heads
    head_of_version: dict = {}  # (usage period, sku, version in force) → index in heads
    by_tenant: dict = {}  # tenant → {head index: GPU-µs}
    for (tenant, _allocation, usage_period, sku, version), micro in buckets.items():
        index = head_of_version.get((usage_period, sku, version))
        if index is None:
            price = book.price(sku, version)
            if price is None:
                raise UnpricedSku(f"no price for SKU {sku!r} in price book v{version}")
            index = head_of_row.get((usage_period, sku, price.version))
            if index is None:
                index = head_of_row[(usage_period, sku, price.version)] = len(heads)
                heads.append(_usage_head(price, usage_period, period, book))
            head_of_version[(usage_period, sku, version)] = index
        pieces = by_tenant.get(tenant)
        if pieces is None:
            by_tenant[tenant] = {index: micro}
        else:
            pieces[index] = pieces.get(index, 0) + micro
    out: dict = defaultdict(list)  # in no particular order: the hash and the writer sort by tenant
    for tenant, pieces in by_tenant.items():
        ordered = sorted(pieces.items(), key=lambda piece: heads[piece[0]][0]) if len(pieces) > 1 else pieces.items()
        lines = []
        for index, micro in ordered:
            kind, sku, description, usage_period, unit_price, price_version, start, end = heads[index][1]
            lines.append(
                RatedLine(
                    kind,
                    sku,
                    description,
                    usage_period,
                    gpu_hours(micro),
                    Unit.GPU_HOUR,
                    unit_price,
                    usage_amount(micro, unit_price),
                    "",
                    micro,
                    ONE,
                    price_version,
                    start,
                    end,
                    "",
                )
            )
        out[tenant] = lines
    return out


def _usage_head(price: Price, usage_period: date, period: date, book: PriceBook) -> tuple:
    late = usage_period != period
    start, end = book.in_force(price.sku, price.version, period_start(usage_period), period_end(usage_period))
    description = (
        f"{price.sku} GPU-hours at {price.unit_price.normalize():f} {price.currency}/GPU-hour "
        f"(price book v{price.version})" + (f", late usage for {format_period(usage_period)}" if late else "")
    )
    kind = LineKind.LATE_USAGE if late else LineKind.USAGE
    return (usage_period, price.sku, start), (
        kind,
        price.sku,
        description,
        usage_period,
        price.unit_price,
        price.version,
        start,
        end,
    )


def _sla_lines(credits: list[Adjustment], cutoff: Cutoff, book: PriceBook) -> dict[int, RatedLine]:
    """adjustment id → its credit line, capped per allocation and month."""
    if not credits:
        return {}
    pairs = {(c.allocation_id, c.period) for c in credits}
    allocations, periods = {a for a, _ in pairs}, {p for _, p in pairs}
    # What the allocation was charged: its usage of the month up to the run's watermark, less
    # the rows held as disputed as of the run (held usage is charged to nobody).
    charged = exact_charges(
        usage_buckets(
            UsageEvent.objects.using(LEDGER)
            .filter(allocation_id__in=allocations, period__in=periods, id__lte=cutoff.watermark)
            .exclude(id__in=held_usage_ids(periods, cutoff)),
            book,
            periods=periods,
            by_allocation=True,
        ),
        book,
    )
    history = list(
        Adjustment.objects.using(LEDGER)
        .filter(
            kind=AdjustmentKind.SLA_CREDIT,
            allocation_id__in=allocations,
            period__in=periods,
            id__lte=cutoff.adjustment_watermark,
        )
        .order_by("id")
    )
    policies = SlaPolicy.objects.using(LEDGER).in_bulk({c.sla_policy_id for c in history if c.sla_policy_id})
    in_scope = {c.pk for c in credits}
    used: dict[tuple, Decimal] = defaultdict(Decimal)
    lines: dict[int, RatedLine] = {}
    for credit in history:
        pair = (credit.allocation_id, credit.period)
        if pair not in pairs:
            continue
        policy = policies.get(credit.sla_policy_id)
        rate = credit.rate if credit.rate is not None else Decimal("1")
        uncapped = (
            Decimal(credit.quantity_micro) * (credit.unit_price or Decimal(0)) * rate / MICRO_PER_HOUR
            if credit.unit_price is not None
            else -credit.amount
        )
        cap_percent = policy.cap_percent if policy else Decimal("100")
        cap = charged.get(pair, Decimal(0)) * cap_percent / 100
        allowed = max(Decimal(0), min(uncapped, cap - used[pair]))
        used[pair] += allowed
        if credit.pk not in in_scope:
            continue
        amount = -allowed.quantize(CENT, rounding=ROUND_HALF_EVEN)
        note = ""
        if allowed < uncapped:
            note = (
                f"capped: {uncapped.quantize(CENT, rounding=ROUND_HALF_EVEN)} before the cap of {cap_percent}% "
                f"of the allocation's {format_period(credit.period)} charge "
                f"({charged.get(pair, Decimal(0)).quantize(CENT, rounding=ROUND_HALF_EVEN)})"
            )
        cited = f"{policy.name} v{policy.version} ({policy.key})" if policy else "no policy recorded"
        lines[credit.pk] = RatedLine(
            kind=LineKind.SLA_CREDIT,
            sku=credit.sku,
            description=f"{credit.reason} — {credit.gpus or '?'} GPUs, policy {cited}"[:300],
            usage_period=credit.period,
            quantity=gpu_hours(credit.quantity_micro),
            unit=Unit.GPU_HOUR,
            unit_price=credit.unit_price,
            amount=amount,
            reference=credit.reference or str(credit.public_id),
            quantity_micro=credit.quantity_micro,
            rate=rate,
            price_version=credit.price_version,
            start=credit.start,
            end=credit.end,
            note=note[:300],
        )
    return lines


def _cap_credits_at_invoice(lines: list[RatedLine]) -> list[RatedLine]:
    """SLA credits never exceed what the invoice charges: the last credits give way first."""
    charges = sum((line.amount for line in lines if line.kind != LineKind.SLA_CREDIT), Decimal("0.00"))
    credits = -sum((line.amount for line in lines if line.kind == LineKind.SLA_CREDIT), Decimal("0.00"))
    excess = credits - max(charges, Decimal("0.00"))
    if excess <= 0:
        return lines
    out = list(lines)
    for i in reversed(range(len(out))):
        line = out[i]
        if excess <= 0 or line.kind != LineKind.SLA_CREDIT or line.amount == 0:
            continue
        cut = min(-line.amount, excess)
        excess -= cut
        note = f"{line.note}; " if line.note else ""
        out[i] = line._replace(
            amount=line.amount + cut,
            note=f"{note}reduced by {cut}: credits never exceed the invoice's charges"[:300],
        )
    return out


def rate_period(
    *,
    period: date,
    cutoff: Cutoff,
    book: PriceBook | None = None,
    tenant_ids: list | None = None,
    price_book_version: int | None = None,
    tally: UsageTally | None = None,
) -> dict:
    """{tenant_id: [RatedLine, ...]} for every tenant with something to bill in `period` (in no
    particular order of tenants).

    `tally`: the run's scan of its usage (`tally_usage` over `run_usage`), when the caller
    already has it; read here otherwise."""
    book = book or PriceBook.load()
    adjustments = Adjustment.objects.using(LEDGER).filter(_adjustment_filter(period, cutoff))
    if tenant_ids is not None:
        adjustments = adjustments.filter(tenant_id__in=tenant_ids)
    if tally is None:
        tally = tally_usage(
            run_usage(period, cutoff, tenant_ids=tenant_ids), book, periods=run_periods(period, cutoff), cut=cutoff
        )
    lines = _usage_lines(tally.buckets, book, period)
    adjustments = list(adjustments.order_by("tenant_id", "id"))
    sla = _sla_lines([a for a in adjustments if a.kind == AdjustmentKind.SLA_CREDIT], cutoff, book)
    for adj in adjustments:
        if adj.kind == AdjustmentKind.SLA_CREDIT:
            lines[adj.tenant_id].append(sla[adj.pk])
            continue
        # an accepted dispute after its month was finalized is late usage, not a manual charge
        kind = LineKind.LATE_USAGE if adj.kind == AdjustmentKind.LATE_USAGE else LineKind.MANUAL
        priced = kind == LineKind.LATE_USAGE and adj.unit_price is not None
        # an adjustment of an earlier month says which month it belongs to
        belongs = f" (for {format_period(adj.period)})" if adj.period != period else ""
        lines[adj.tenant_id].append(
            RatedLine(
                kind=kind,
                sku=adj.sku,
                description=(adj.reason[: 300 - len(belongs)] + belongs),
                usage_period=adj.period,
                quantity=gpu_hours(adj.quantity_micro),
                unit=Unit.GPU_HOUR,
                # accepted disputed usage: its own interval's price row, so the line recomputes
                unit_price=adj.unit_price if priced else None,
                amount=(
                    usage_amount(adj.quantity_micro, adj.unit_price)
                    if priced
                    else adj.amount.quantize(CENT, rounding=ROUND_HALF_EVEN)
                ),
                reference=adj.reference or str(adj.public_id),
                quantity_micro=adj.quantity_micro,
                price_version=adj.price_version if priced else None,
                start=adj.start,
                end=adj.end,
                note=f"recorded by {adj.actor}"[:300] if adj.actor else "",
            )
        )
    # Only an invoice with SLA credits can need its credits capped (the others stay as they are).
    for tenant in {adj.tenant_id for adj in adjustments if adj.kind == AdjustmentKind.SLA_CREDIT}:
        lines[tenant] = _cap_credits_at_invoice(lines[tenant])
    return dict(lines)


def run_periods(period: date, cut: Cutoff) -> set[date]:
    """The months a run of `period` with this cutoff can read usage of."""
    return {period, *_late_periods(period, cut)}


def run_usage(period: date, cut: Cutoff, *, tenant_ids=None):
    """The usage rows a run reads (its scope, of every dispute state; `tally_usage` keeps the
    billable ones)."""
    usage = UsageEvent.objects.using(LEDGER).filter(usage_scope(period, cut))
    return usage if tenant_ids is None else usage.filter(tenant_id__in=tenant_ids)


def run_spans(period: date, cut: Cutoff) -> dict:
    """(allocation_id, node_id, tenant_id) → [first start, last end] in microseconds since 1970,
    for billing.reconcile.contradicted_usage: every pair with rows in the run's scope
    (`usage_scope`), each span at least as wide as those rows'.

    Read from the spans the database keeps (billing.models.UsageSpan), one row per pair and
    month: the month's pairs, and those of late months with a row above the last finalized
    run's watermark. A span may be wider than the run's rows (it also covers rows above the
    watermark, and disputed ones): the reconciliation then reads that pair's rows and checks
    each, so what it finds is what it would find from the rows alone."""
    scope = Q(period=period)
    late = _late_periods(period, cut)
    if late:
        scope |= Q(period__in=late, last_id__gt=cut.prior_watermark)
    spans: dict = {}
    for allocation, node, tenant, first, last in (
        UsageSpan.objects.using(LEDGER)
        .filter(scope)
        .annotate(first=EpochMicros("first_start"), last=EpochMicros("last_end"))
        .values_list("allocation_id", "node_id", "tenant_id", "first", "last")
    ):
        span = spans.setdefault((allocation, node, tenant), [first, last])  # a pair in several months
        if first < span[0]:
            span[0] = first
        if last > span[1]:
            span[1] = last
    return spans


def output_hash(*, period: date, price_book_version: int, rated: dict) -> str:
    """SHA-256 of the rated result in canonical form: equal results hash equally.

    The canonical form is the JSON text of {"period", "price_book_version", "invoices": {str(tenant):
    [{field: str(value)} per line]}} with sorted keys and no spaces (json.dumps, ASCII escapes).
    It is written here directly rather than through json.dumps of 10,000 dicts, byte for byte
    the same (tests pin it against json.dumps): fields in name order, each str(value) escaped by
    json's own encoder. A month's lines share all but their quantities and amounts (the same
    description, price, dates and time range objects), so the text around those three is built
    once per distinct set of shared value objects, found by their ids (all alive in `rated`
    while this runs, so an id is never reused)."""
    around: dict = {}  # ids of a line's shared values → the line's JSON text around its own three

    def line_json(line) -> str:
        shared = tuple(map(id, _shared_of(line)))
        parts = around.get(shared)
        if parts is None:
            text = [encode_basestring_ascii(str(line[i])) for i in _HASH_ORDER]
            for slot in _OWN_SLOTS:
                text[slot] = _SLOT
            parts = around[shared] = (_LINE_JSON % tuple(text)).split(_SLOT)
        first, second, third = _own_of(line)
        return "".join(
            (
                parts[0],
                encode_basestring_ascii(str(first)),
                parts[1],
                encode_basestring_ascii(str(second)),
                parts[2],
                encode_basestring_ascii(str(third)),
                parts[3],
            )
        )

    by_name = {str(tenant): tenant for tenant in rated}  # as json.dumps keys them (the last of equal names)
    invoices = [
        f"{encode_basestring_ascii(name)}:[{','.join(line_json(line) for line in rated[by_name[name]])}]"
        for name in sorted(by_name)
    ]
    canonical = (
        f'{{"invoices":{{{",".join(invoices)}}},"period":{encode_basestring_ascii(format_period(period))},'
        f'"price_book_version":{json.dumps(price_book_version)}}}'
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


# Line fields in the canonical form's (sorted) order, and its JSON object with a slot for each.
_HASH_ORDER = tuple(LINE_FIELDS.index(name) for name in sorted(LINE_FIELDS))
_LINE_JSON = "{" + ",".join(f'"{name}":%s' for name in sorted(LINE_FIELDS)) + "}"
# The fields each line has of its own; the others are usually shared with other lines.
_OWN = tuple(
    sorted((LINE_FIELDS.index(name) for name in ("amount", "quantity", "quantity_micro")), key=_HASH_ORDER.index)
)
_OWN_SLOTS = tuple(_HASH_ORDER.index(i) for i in _OWN)
_SHARED = tuple(i for i in range(len(LINE_FIELDS)) if i not in _OWN)
_own_of, _shared_of = itemgetter(*_OWN), itemgetter(*_SHARED)
_SLOT = "\x00"  # marks where a line's own values go; never in JSON text (json escapes it as \u0000)
