"""An independent check of every live invoice and credit note, written from docs/billing.md alone.

It shares the models with the rating code and nothing else: no import of billing.services
(rating, runs, credits, disputes, corrections). Every rule it applies is one the docs write
down ("Invoice rules", "Lines people can check", "Disputed usage"), re-implemented here from
the raw ledger rows: usage rows, price-book rows, dispute decisions, adjustments, SLA policies
and billing runs. Where it and the product disagree, one of them does not follow the docs.

What it checks:

- **Every live invoice recomputes.** For each billing run that produced a live invoice (and
  every finalizing run), the run's scope is rebuilt from what the run recorded: usage of its
  month up to its watermark W, late usage of months finalized before it above the previous
  finalized run's watermark W0, adjustments likewise, and the disputes as of the run (those
  with id ≤ its dispute watermark, decided by a decision numbered ≤ its decision watermark).
  Rows are split at price-book version changes (quantity by time, remainder on the last piece),
  priced by the version in force, grouped by month × SKU × price row and rounded half-even to
  the cent per line. SLA credits are capped per allocation and month at the policy's share of
  that allocation's billable charge, then at the invoice's charges (last credits first). Every
  GPU line, its quantity, unit price, version and amount must match; energy lines (their kWh
  come from the control plane) must satisfy amount = kWh × unit price; the total is the sum.
- **Every row is billed exactly once.** Finalized runs' late ranges must follow one another
  (each run's W0 is the previous finalized run's W), each finalized month has one finalizing
  run, and every tenant the recompute bills in a finalized run has one live invoice from it.
  An accepted dispute with a late charge must have been held by the run that covered its row
  (else it is billed twice); one without must have been billed by it (else never).
- **Credit notes** credit at most what each line billed, and their totals add up.
"""

from __future__ import annotations

import time
from bisect import bisect_right
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal

from django.db.models import Count, Q, Sum

from billing.models import (
    Adjustment,
    AdjustmentKind,
    BillingRun,
    CreditNote,
    CreditNoteLine,
    DisputeStatus,
    Invoice,
    InvoiceLine,
    InvoiceStatus,
    LedgerArchiveAction,
    LedgerArchiveRecord,
    LineKind,
    PriceBookEntry,
    SlaPolicy,
    UsageDispute,
    UsageEvent,
)

LEDGER = "ledger"
ENERGY_SKU = "energy-facility-kwh"  # docs/billing.md: the price book's row for facility kWh
HOUR = timedelta(hours=1)


def _whole_hour(moment: datetime) -> bool:
    return moment == moment.replace(minute=0, second=0, microsecond=0)


def _next_whole_hour(moment: datetime) -> datetime:
    """The first whole hour at or after `moment`: the first hour a price change applies to."""
    floor = moment.replace(minute=0, second=0, microsecond=0)
    return floor if floor == moment else floor + HOUR


CENT = Decimal("0.01")
US_PER_HOUR = Decimal(3_600_000_000)
ONE_US = timedelta(microseconds=1)
CHUNK = 20_000


def _start_of(month: date) -> datetime:
    return datetime(month.year, month.month, 1, tzinfo=UTC)


def _end_of(month: date) -> datetime:
    return datetime(month.year + month.month // 12, month.month % 12 + 1, 1, tzinfo=UTC)


def cents(value: Decimal) -> Decimal:
    return value.quantize(CENT, rounding=ROUND_HALF_EVEN)


@dataclass
class Difference:
    what: str
    invoice: str = ""  # number, or "draft <id>"
    tenant_id: str = ""
    expected: str = ""
    found: str = ""
    rows: str = ""  # the ledger rows behind it (ids, ranges)

    def __str__(self) -> str:
        where = f"{self.invoice} (tenant {self.tenant_id})" if self.invoice else f"tenant {self.tenant_id}"
        text = f"{where}: {self.what}"
        if self.expected or self.found:
            text += f" — expected {self.expected or 'nothing'}, found {self.found or 'nothing'}"
        if self.rows:
            text += f" [{self.rows}]"
        return text

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in ("what", "invoice", "tenant_id", "expected", "found", "rows")}


@dataclass
class Report:
    invoices: int = 0
    credit_notes: int = 0
    runs: int = 0
    usage_rows: int = 0
    archived: int = 0  # invoices whose scope reads an archived month: their frozen lines are the record
    seconds: float = 0.0
    differences: list[Difference] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.differences


class Prices:
    """The price book as of a moment, from its rows: "version V is in force from its
    effective_from; at t the version in force is the highest one already effective; a SKU's
    price in V is its row with the highest version ≤ V"."""

    def __init__(self, rows):
        self.since: dict[int, datetime] = {}
        self.rows: dict[str, list[tuple[int, Decimal]]] = defaultdict(list)
        for version, sku, price, since in sorted(rows, key=lambda r: r[0]):
            self.since[version] = min(self.since.get(version, since), since)
            self.rows[sku].append((version, price))
        # the moments the version in force changes, and the version from each on
        self.changes: list[datetime] = []
        self.versions: list[int] = []
        for moment in sorted(set(self.since.values())):
            version = max(v for v, s in self.since.items() if s <= moment)
            if not self.versions or version != self.versions[-1]:
                self.changes.append(moment)
                self.versions.append(version)

    def version_at(self, moment: datetime) -> int | None:
        i = bisect_right(self.changes, moment) - 1
        return self.versions[i] if i >= 0 else None

    def row(self, sku: str, version: int) -> tuple[int, Decimal] | None:
        found = None
        for row_version, price in self.rows.get(sku, ()):
            if row_version <= version:
                found = (row_version, price)
        return found

    def pieces(self, start: datetime, end: datetime, micro: int):
        """[start, end) cut where the version in force changes; quantity by time (whole µs,
        rounded down), the remainder on the last piece: [(version, GPU-µs), ...]."""
        cuts = [t for t in self.changes if start < t < end]
        if not cuts:
            return [(self.version_at(start), micro)]
        bounds = [start, *cuts, end]
        whole = (end - start) // ONE_US
        out, given = [], 0
        for i in range(len(bounds) - 1):
            lo, hi = bounds[i], bounds[i + 1]
            share = micro - given if i == len(bounds) - 2 else micro * ((hi - lo) // ONE_US) // whole
            given += share
            out.append((self.version_at(lo), share))
        return out


@dataclass(frozen=True)
class Scope:
    """What one billing run read, as it recorded it."""

    run: BillingRun
    finalized_before: frozenset

    @property
    def late_months(self) -> list[date]:
        return sorted(p for p in self.finalized_before if p != self.run.period)

    def holds(self, dispute) -> bool:
        """Was this dispute's row held out of the run (a dispute it saw, not accepted by a
        decision it saw)? `dispute`: (id, status, decision_seq)."""
        dispute_id, status, seq = dispute
        run = self.run
        if run.dispute_watermark is not None and dispute_id > run.dispute_watermark:
            return False
        accepted = status == DisputeStatus.ACCEPTED and (
            run.decision_watermark is None or seq is None or seq <= run.decision_watermark
        )
        return not accepted


def _line_key(kind, usage_period, sku, unit_price, version, micro, amount) -> tuple:
    return (
        str(kind),
        usage_period.isoformat() if usage_period else "",
        sku or "",
        None if unit_price is None else Decimal(unit_price).normalize(),
        version,
        int(micro),
        Decimal(amount),
    )


def _show(key: tuple) -> str:
    kind, month, sku, price, version, micro, amount = key
    at = f" at {price:f} (v{version})" if price is not None else ""
    return f"{kind} {month} {sku} {Decimal(micro).scaleb(-6)} GPU-s{at} = {amount}"


class Verifier:
    def __init__(self, *, tenant_ids=None):
        self.tenants = None if tenant_ids is None else {str(t) for t in tenant_ids}
        self.report = Report()
        self.book_rows = list(
            PriceBookEntry.objects.using(LEDGER).values_list(
                "version", "sku", "unit_price", "effective_from", "created_at"
            )
        )
        self._books: dict = {}
        self.disputes = {
            event_id: (pk, status, seq)
            for event_id, pk, status, seq in UsageDispute.objects.using(LEDGER).values_list(
                "usage_event_id", "id", "status", "decision_seq"
            )
        }
        self.policies = {pk: cap for pk, cap in SlaPolicy.objects.using(LEDGER).values_list("id", "cap_percent")}
        self.runs = {run.pk: run for run in BillingRun.objects.using(LEDGER).all()}
        self.finalizing = sorted((r for r in self.runs.values() if r.finalize), key=lambda r: r.finished_at)
        latest: dict = {}
        for period, action in (
            LedgerArchiveRecord.objects.using(LEDGER).order_by("created_at").values_list("period", "action")
        ):
            latest[period] = action
        self.archived = {p for p, action in latest.items() if action != LedgerArchiveAction.RESTORED}

    # -- inputs --------------------------------------------------------------------------------

    def book(self, as_of: datetime) -> Prices:
        key = sum(1 for row in self.book_rows if row[4] <= as_of)
        if key not in self._books:
            self._books[key] = Prices([(v, s, p, e) for v, s, p, e, created in self.book_rows if created <= as_of])
        return self._books[key]

    def scope(self, run: BillingRun) -> Scope:
        before = frozenset(r.period for r in self.finalizing if r.finished_at < run.finished_at)
        return Scope(run, before)

    def _in_scope_filter(self, scope: Scope):
        run = scope.run
        where = Q(period=run.period, id__lte=run.watermark)
        if scope.late_months:
            where |= Q(period__in=scope.late_months, id__gt=run.prior_watermark, id__lte=run.watermark)
        return where

    def _adjustment_filter(self, scope: Scope):
        run = scope.run
        where = Q(period=run.period, id__lte=run.adjustment_watermark)
        if scope.late_months:
            where |= Q(
                period__in=scope.late_months,
                id__gt=run.prior_adjustment_watermark,
                id__lte=run.adjustment_watermark,
            )
        return where

    def _rows(self, queryset, fields):
        """Stream rows in id order, a chunk at a time (keyset pagination: no server cursor)."""
        last = 0
        while True:
            chunk = list(queryset.filter(id__gt=last).order_by("id").values_list("id", *fields)[:CHUNK])
            if not chunk:
                return
            yield from chunk
            last = chunk[-1][0]

    # -- the recompute -------------------------------------------------------------------------

    def expected(self, scope: Scope, prices: Prices, tenants: set | None) -> dict:
        """{tenant id (str): [line key, ...]} for the GPU lines the run's rules give."""
        run = scope.run
        usage = UsageEvent.objects.using(LEDGER).filter(self._in_scope_filter(scope))
        if tenants is not None:
            usage = usage.filter(tenant_id__in=list(tenants))
        # (tenant, month, sku, price row version) → [GPU-µs, pieces, price]
        groups: dict = {}

        def add(tenant, month, sku, version, micro, pieces, row_id=None):
            row = None if version is None else prices.row(sku, version)
            if row is None:
                self.report.differences.append(
                    Difference("usage with no price in force", "", str(tenant), rows=f"usage row {row_id}")
                )
                return
            key = (str(tenant), month, sku, row[0])
            slot = groups.get(key)
            if slot is None:
                groups[key] = [micro, pieces, row[1]]
            else:
                slot[0] += micro
                slot[1] += pieces

        # Rows inside one span of a version in force are summed by the database (a row never
        # crosses a month); the few that straddle a change are read and split here. Held rows
        # (disputes, as of the run) are read by id and taken back out.
        months = {run.period, *scope.late_months}
        lo_all = min(_start_of(m) for m in months)
        hi_all = max(_end_of(m) for m in months)
        cuts = [t for t in prices.changes if lo_all < t < hi_all]
        bounds = [None, *cuts, None]
        straddles = Q()
        for t in cuts:
            straddles |= Q(start__lt=t, end__gt=t)
        whole = usage.exclude(straddles) if cuts else usage
        for i in range(len(bounds) - 1):
            lo, hi = bounds[i], bounds[i + 1]
            span = whole
            if lo is not None:
                span = span.filter(start__gte=lo)
            if hi is not None:
                span = span.filter(end__lte=hi)
            for tenant, month, sku, micro, count in (
                span.values_list("tenant_id", "period", "sku")
                .annotate(m=Sum("quantity_micro"), n=Count("id"))
                .order_by()
            ):
                self.report.usage_rows += count
                version = prices.version_at(lo) if lo is not None else prices.version_at(_start_of(month))
                add(tenant, month, sku, version, micro, count)
        if cuts:
            for row_id, tenant, month, sku, start, end, micro in self._rows(
                usage.filter(straddles), ("tenant_id", "period", "sku", "start", "end", "quantity_micro")
            ):
                self.report.usage_rows += 1
                dispute = self.disputes.get(row_id)
                if dispute is not None and scope.holds(dispute):
                    continue
                for version, share in prices.pieces(start, end, micro):
                    add(tenant, month, sku, version, share, 1, row_id)
        held = [event for event, dispute in self.disputes.items() if scope.holds(dispute)]
        for lo_i in range(0, len(held), 1000):
            chunk = usage.filter(id__in=held[lo_i : lo_i + 1000])
            if cuts:
                chunk = chunk.exclude(straddles)
            for tenant, month, sku, start, micro in chunk.values_list(
                "tenant_id", "period", "sku", "start", "quantity_micro"
            ):
                version = prices.version_at(start)
                row = None if version is None else prices.row(sku, version)
                key = (str(tenant), month, sku, row[0] if row else None)
                if key not in groups:  # unpriced: already a difference
                    continue
                groups[key][0] -= micro
                groups[key][1] -= 1
                if not groups[key][1]:
                    del groups[key]
        out: dict = defaultdict(list)
        for (tenant, month, sku, version), (micro, _pieces, price) in groups.items():
            kind = LineKind.USAGE if month == run.period else LineKind.LATE_USAGE
            amount = cents(Decimal(micro) * price / US_PER_HOUR)
            out[tenant].append(_line_key(kind, month, sku, price, version, micro, amount))

        adjustments = Adjustment.objects.using(LEDGER).filter(self._adjustment_filter(scope))
        if tenants is not None:
            adjustments = adjustments.filter(tenant_id__in=list(tenants))
        adjustments = list(adjustments.order_by("id"))
        credited = self._sla_amounts([a for a in adjustments if a.kind == AdjustmentKind.SLA_CREDIT], scope, prices)
        sla_by_tenant: dict = defaultdict(list)
        for adj in adjustments:
            tenant = str(adj.tenant_id)
            if adj.kind == AdjustmentKind.SLA_CREDIT:
                sla_by_tenant[tenant].append(adj)
                continue
            priced = adj.kind == AdjustmentKind.LATE_USAGE and adj.unit_price is not None
            if priced:
                key = _line_key(
                    LineKind.LATE_USAGE,
                    adj.period,
                    adj.sku,
                    adj.unit_price,
                    adj.price_version,
                    adj.quantity_micro,
                    cents(Decimal(adj.quantity_micro) * adj.unit_price / US_PER_HOUR),
                )
            else:
                kind = LineKind.LATE_USAGE if adj.kind == AdjustmentKind.LATE_USAGE else LineKind.MANUAL
                key = _line_key(kind, adj.period, adj.sku, None, None, adj.quantity_micro, cents(adj.amount))
            out[tenant].append(key)
        for tenant, credits in sla_by_tenant.items():
            # credits on one invoice never exceed its charges: the last credits give way first
            charges = sum((k[6] for k in out[tenant]), Decimal("0.00"))
            amounts = [credited[c.pk] for c in credits]
            excess = -sum(amounts, Decimal("0.00")) - max(charges, Decimal("0.00"))
            for i in reversed(range(len(amounts))):
                if excess <= 0:
                    break
                cut = min(-amounts[i], excess)
                amounts[i] += cut
                excess -= cut
            for credit, amount in zip(credits, amounts, strict=True):
                out[tenant].append(
                    _line_key(
                        LineKind.SLA_CREDIT,
                        credit.period,
                        credit.sku,
                        credit.unit_price,
                        credit.price_version,
                        credit.quantity_micro,
                        amount,
                    )
                )
        return out

    def _sla_amounts(self, credits: list, scope: Scope, prices: Prices) -> dict:
        """credit id → its capped amount (negative cents): per allocation and month, at most the
        policy's cap_percent of the allocation's billable charge that month, earlier credits first."""
        if not credits:
            return {}
        run = scope.run
        pairs = {(c.allocation_id, c.period) for c in credits}
        # the allocation's charge: its billable rows of the month up to W, unrounded, summed per
        # SKU and version in force (GPU-µs × price ÷ 3.6e9)
        micro: dict = defaultdict(int)
        for allocation, month in pairs:
            rows = UsageEvent.objects.using(LEDGER).filter(
                allocation_id=allocation, period=month, id__lte=run.watermark
            )
            for _id, sku, start, end, q in self._rows(rows, ("sku", "start", "end", "quantity_micro")):
                dispute = self.disputes.get(_id)
                if dispute is not None and scope.holds(dispute):
                    continue
                for version, share in prices.pieces(start, end, q):
                    if version is not None:
                        micro[(allocation, month, sku, version)] += share
        charged: dict = defaultdict(Decimal)
        for (allocation, month, sku, version), q in micro.items():
            row = prices.row(sku, version)
            if row is not None:
                charged[(allocation, month)] += Decimal(q) * row[1] / US_PER_HOUR
        history = (
            Adjustment.objects.using(LEDGER)
            .filter(
                kind=AdjustmentKind.SLA_CREDIT,
                allocation_id__in={a for a, _ in pairs},
                period__in={m for _, m in pairs},
                id__lte=run.adjustment_watermark,
            )
            .order_by("id")
        )
        wanted = {c.pk for c in credits}
        used: dict = defaultdict(Decimal)
        out = {}
        for credit in history:
            pair = (credit.allocation_id, credit.period)
            if pair not in pairs:
                continue
            rate = credit.rate if credit.rate is not None else Decimal(1)
            if credit.unit_price is not None:
                uncapped = Decimal(credit.quantity_micro) * credit.unit_price * rate / US_PER_HOUR
            else:
                uncapped = -credit.amount
            cap = charged[pair] * self.policies.get(credit.sla_policy_id, Decimal(100)) / 100
            allowed = max(Decimal(0), min(uncapped, cap - used[pair]))
            used[pair] += allowed
            if credit.pk in wanted:
                out[credit.pk] = -cents(allowed)
        return out

    # -- the comparison ------------------------------------------------------------------------

    def run(self) -> Report:
        began = time.monotonic()
        invoices = Invoice.objects.using(LEDGER).exclude(status=InvoiceStatus.VOID)
        if self.tenants is not None:
            invoices = invoices.filter(tenant_id__in=list(self.tenants))
        invoices = list(invoices)
        lines: dict = defaultdict(list)
        for line in InvoiceLine.objects.using(LEDGER).filter(invoice__in=[i.pk for i in invoices]).order_by("position"):
            lines[line.invoice_id].append(line)
        self.report.invoices = len(invoices)

        # invoices by the run that produced them and the price book they were rated with
        by_run: dict = defaultdict(list)
        for invoice in invoices:
            self._check_total(invoice, lines[invoice.pk])
            run = self.runs.get(invoice.billing_run_id)
            if run is None:
                self.report.differences.append(
                    Difference("invoice produced by no billing run", self._name(invoice), str(invoice.tenant_id))
                )
                continue
            as_of = max(run.finished_at, invoice.created_at)
            by_run[(run.pk, as_of if invoice.replaces_id else run.finished_at)].append(invoice)
        # every finalizing run is checked for tenants it bills that have no live invoice from it
        for run in self.finalizing:
            by_run.setdefault((run.pk, run.finished_at), [])
        self.report.runs = len({run_id for run_id, _ in by_run})

        for (run_id, as_of), group in sorted(by_run.items(), key=lambda item: (str(item[0][0]), item[0][1])):
            run = self.runs[run_id]
            scope = self.scope(run)
            if self.archived & {run.period, *scope.late_months}:
                self.report.archived += len(group)
                continue
            tenants = None if not any(i.replaces_id for i in group) else {str(i.tenant_id) for i in group}
            if tenants is None and self.tenants is not None:
                tenants = self.tenants
            expected = self.expected(scope, self.book(as_of), tenants)
            found = {str(i.tenant_id): i for i in group}
            for tenant, keys in expected.items():
                invoice = found.get(tenant)
                if invoice is None:
                    if run.finalize and any(k[6] for k in keys) and not self._replaced_elsewhere(run, tenant, by_run):
                        self.report.differences.append(
                            Difference(
                                f"billable usage of {run.period:%Y-%m} in a finalized run's scope is on no live invoice",
                                tenant_id=tenant,
                                expected=", ".join(_show(k) for k in sorted(keys, key=str)),
                                rows=f"run {run.pk} ids {run.prior_watermark}..{run.watermark}",
                            )
                        )
                    continue
                self._compare(invoice, keys, lines[invoice.pk], run)
            for tenant, invoice in found.items():
                if tenant not in expected:
                    self._compare(invoice, [], lines[invoice.pk], run)
        self._check_energy_hours(invoices, lines)
        self._check_tiling()
        self._check_late_disputes()
        self._check_credit_notes(lines)
        self.report.seconds = time.monotonic() - began
        return self.report

    def _replaced_elsewhere(self, run, tenant, by_run) -> bool:
        """A tenant's invoice of this run re-issued with another price book is checked there."""
        return any(
            any(str(i.tenant_id) == tenant for i in group) for (run_id, _), group in by_run.items() if run_id == run.pk
        )

    @staticmethod
    def _name(invoice: Invoice) -> str:
        return invoice.number or f"draft {invoice.period:%Y-%m} {invoice.pk}"

    def _check_total(self, invoice: Invoice, its_lines) -> None:
        total = sum((line.amount for line in its_lines), Decimal("0.00"))
        if total != invoice.total:
            self.report.differences.append(
                Difference(
                    "total is not the sum of its lines",
                    self._name(invoice),
                    str(invoice.tenant_id),
                    str(total),
                    str(invoice.total),
                )
            )
        if invoice.status == InvoiceStatus.FINALIZED and not invoice.number:
            self.report.differences.append(
                Difference("finalized invoice without a number", self._name(invoice), str(invoice.tenant_id))
            )

    def _compare(self, invoice: Invoice, keys: list, its_lines, run: BillingRun) -> None:
        actual = []
        for line in its_lines:
            if line.kind == LineKind.ENERGY:
                if line.unit_price is None or cents(line.quantity * line.unit_price) != line.amount:
                    self.report.differences.append(
                        Difference(
                            f"energy line {line.position}: amount is not kWh × unit price",
                            self._name(invoice),
                            str(invoice.tenant_id),
                            found=f"{line.quantity} × {line.unit_price} = {line.amount}",
                        )
                    )
                continue
            actual.append(
                _line_key(
                    line.kind,
                    line.usage_period,
                    line.sku,
                    line.unit_price,
                    line.price_version,
                    line.quantity_micro,
                    line.amount,
                )
            )
        want, have = sorted(keys, key=str), sorted(actual, key=str)
        if want == have:
            return
        missing = [k for k in want if k not in have or want.count(k) > have.count(k)]
        extra = [k for k in have if k not in want or have.count(k) > want.count(k)]
        self.report.differences.append(
            Difference(
                "lines do not recompute",
                self._name(invoice),
                str(invoice.tenant_id),
                expected="; ".join(_show(k) for k in dict.fromkeys(missing)),
                found="; ".join(_show(k) for k in dict.fromkeys(extra)),
                rows=f"run {run.pk}: {run.period:%Y-%m} ids ≤ {run.watermark}, late ids {run.prior_watermark}..{run.watermark}",
            )
        )

    def _check_energy_hours(self, invoices, lines) -> None:
        """Energy is priced by the hour ("an hour's energy is priced by the price-book version in
        force at the hour's start"): every energy line covers whole hours, its price row is the
        energy row of the version in force at the start of each hour it covers, and no hour of a
        tenant's month is on two energy lines of its live invoices."""
        hours_of: dict = defaultdict(list)  # (tenant, month, group) → [(start, end, invoice, line)]
        for invoice in invoices:
            run = self.runs.get(invoice.billing_run_id)  # energy is carried over on a re-issue
            prices = self.book(run.finished_at if run is not None else invoice.created_at)
            # drafts are checked on their own; finalized invoices of a month together
            group = invoice.pk if invoice.status != InvoiceStatus.FINALIZED else "finalized"
            for line in lines[invoice.pk]:
                if line.kind != LineKind.ENERGY:
                    continue
                name, tenant = self._name(invoice), str(invoice.tenant_id)
                if line.start is None or line.end is None or not (_whole_hour(line.start) and _whole_hour(line.end)):
                    self.report.differences.append(
                        Difference(
                            f"energy line {line.position} does not cover whole hours",
                            name,
                            tenant,
                            found=f"{line.start} – {line.end}",
                        )
                    )
                    continue
                hour_starts = [line.start] + [
                    _next_whole_hour(c) for c in prices.changes if line.start < _next_whole_hour(c) < line.end
                ]
                for hour in hour_starts:
                    version = prices.version_at(hour)
                    row = prices.row(ENERGY_SKU, version) if version is not None else None
                    if row != (line.price_version, line.unit_price):
                        self.report.differences.append(
                            Difference(
                                f"energy line {line.position}: the hour from {hour:%Y-%m-%d %H:%M} is not priced "
                                "by the version in force at its start",
                                name,
                                tenant,
                                expected=f"version {row[0]} at {row[1]}" if row else "no energy price",
                                found=f"version {line.price_version} at {line.unit_price}",
                            )
                        )
                        break
                hours_of[(tenant, line.usage_period, group)].append((line.start, line.end, name, line.position))
        for (tenant, month, _), spans in hours_of.items():
            spans.sort()
            for (_, end, name, position), (start, _, other, other_position) in zip(spans, spans[1:], strict=False):
                if start < end:
                    self.report.differences.append(
                        Difference(
                            f"energy of {month:%Y-%m} from {start:%Y-%m-%d %H:%M} billed twice",
                            other,
                            tenant,
                            expected="each hour on one energy line",
                            found=f"{name} line {position} and {other} line {other_position}",
                        )
                    )

    def _check_tiling(self) -> None:
        """Finalized runs' late ranges follow one another: no gap, no overlap."""
        previous_w = previous_aw = 0
        seen: set = set()
        for run in self.finalizing:
            if run.period in seen:
                self.report.differences.append(
                    Difference(f"{run.period:%Y-%m} was finalized twice", rows=f"run {run.pk}")
                )
            seen.add(run.period)
            if (run.prior_watermark, run.prior_adjustment_watermark) != (previous_w, previous_aw) or (
                run.watermark < run.prior_watermark
            ):
                self.report.differences.append(
                    Difference(
                        "finalized runs' ranges do not follow one another (rows billed twice or never)",
                        expected=f"prior watermarks {previous_w}/{previous_aw}",
                        found=f"{run.prior_watermark}/{run.prior_adjustment_watermark}",
                        rows=f"run {run.pk} ({run.period:%Y-%m})",
                    )
                )
            previous_w, previous_aw = run.watermark, run.adjustment_watermark

    def _covering_run(self, event_id: int, period: date) -> BillingRun | None:
        for run in self.finalizing:
            scope = self.scope(run)
            if (period == run.period and event_id <= run.watermark) or (
                period in scope.late_months and run.prior_watermark < event_id <= run.watermark
            ):
                return run
        return None

    def _check_late_disputes(self) -> None:
        accepted = UsageDispute.objects.using(LEDGER).filter(status=DisputeStatus.ACCEPTED)
        if self.tenants is not None:
            accepted = accepted.filter(tenant_id__in=list(self.tenants))
        for dispute in accepted.values(
            "id", "usage_event_id", "period", "status", "decision_seq", "adjustment_id", "tenant_id"
        ):
            run = self._covering_run(dispute["usage_event_id"], dispute["period"])
            if run is None:
                continue
            held = self.scope(run).holds((dispute["id"], dispute["status"], dispute["decision_seq"]))
            if held and dispute["adjustment_id"] is None:
                self.report.differences.append(
                    Difference(
                        "accepted usage held by the run that covered it, and no late charge: never billed",
                        tenant_id=str(dispute["tenant_id"]),
                        rows=f"usage row {dispute['usage_event_id']}, run {run.pk}",
                    )
                )
            if not held and dispute["adjustment_id"] is not None:
                self.report.differences.append(
                    Difference(
                        "accepted usage billed by its run and again as a late charge",
                        tenant_id=str(dispute["tenant_id"]),
                        rows=f"usage row {dispute['usage_event_id']}, run {run.pk}, adjustment {dispute['adjustment_id']}",
                    )
                )

    def _check_credit_notes(self, lines) -> None:
        notes = CreditNote.objects.using(LEDGER).all()
        if self.tenants is not None:
            notes = notes.filter(tenant_id__in=list(self.tenants))
        notes = list(notes)
        self.report.credit_notes = len(notes)
        note_lines: dict = defaultdict(list)
        credited: dict = defaultdict(Decimal)
        billed = {}
        for cn_line in (
            CreditNoteLine.objects.using(LEDGER).select_related("invoice_line").filter(credit_note__in=notes)
        ):
            note_lines[cn_line.credit_note_id].append(cn_line)
            credited[cn_line.invoice_line_id] += cn_line.amount
            billed[cn_line.invoice_line_id] = cn_line.invoice_line
        by_invoice: dict = defaultdict(list)
        for note in notes:
            by_invoice[note.invoice_id].append(note)
        invoices = Invoice.objects.using(LEDGER).in_bulk(list(by_invoice))
        for invoice_id, its_notes in by_invoice.items():
            invoice = invoices[invoice_id]
            net = sum((n.total for n in its_notes), Decimal("0.00"))
            if net > max(invoice.total, Decimal("0.00")):
                self.report.differences.append(
                    Difference(
                        "credit notes credit more than the invoice's net",
                        self._name(invoice),
                        str(invoice.tenant_id),
                        expected=f"at most {invoice.total}",
                        found=str(net),
                    )
                )
            # tax: each note's total × the invoice's rate, half-even; the note that credits the
            # whole net gives back exactly the tax left; never more tax than the invoice's
            rate = invoice.tax_rate_percent or Decimal("0.00")
            invoice_tax = cents(invoice.total * rate / 100)
            given_net = given_tax = Decimal("0.00")
            for n in sorted(its_notes, key=lambda n: (n.issued_at, n.number)):
                if n.tax is None:  # issued before credit notes carried tax
                    given_net += n.total
                    continue
                if given_net + n.total >= invoice.total:
                    want = invoice_tax - given_tax
                else:
                    want = min(cents(n.total * rate / 100), invoice_tax - given_tax)
                if n.tax != want or (n.tax_rate_percent or Decimal("0.00")) != rate:
                    self.report.differences.append(
                        Difference(
                            f"credit note {n.number}: tax is not its total × the invoice's rate",
                            self._name(invoice),
                            str(invoice.tenant_id),
                            expected=f"{want} at {rate}%",
                            found=f"{n.tax} at {n.tax_rate_percent}%",
                        )
                    )
                given_net += n.total
                given_tax += n.tax
        for note in notes:
            total = sum((x.amount for x in note_lines[note.pk]), Decimal("0.00"))
            if total != note.total:
                self.report.differences.append(
                    Difference(
                        f"credit note {note.number}: total is not the sum of its lines",
                        tenant_id=str(note.tenant_id),
                        expected=str(total),
                        found=str(note.total),
                    )
                )
            if any(x.amount <= 0 for x in note_lines[note.pk]):
                self.report.differences.append(
                    Difference(
                        f"credit note {note.number}: a line credits nothing or a negative amount",
                        tenant_id=str(note.tenant_id),
                    )
                )
        for line_id, amount in credited.items():
            line = billed[line_id]
            if amount > max(line.amount, Decimal("0.00")):
                self.report.differences.append(
                    Difference(
                        f"credit notes credit more than line {line.position} billed",
                        tenant_id="",
                        expected=f"at most {line.amount}",
                        found=str(amount),
                        rows=f"invoice line {line_id}",
                    )
                )


def verify_billing(*, tenant_ids=None) -> Report:
    """Recompute every live invoice (of these tenants) and credit note; the differences found."""
    return Verifier(tenant_ids=tenant_ids).run()
