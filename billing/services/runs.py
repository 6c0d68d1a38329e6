"""Billing runs: rate a period into draft invoices, optionally finalize them.

A run first holds as disputed the usage the allocation history contradicts (never rated until
an operator accepts it), then rates. It is one transaction on the ledger database holding the
`billing_run` advisory lock:
a worker killed mid-run leaves nothing behind (no partial invoice, no BillingRun row, no
consumed invoice number). Draft invoices are rewritten in place; finalized ones are never
touched again (triggers enforce it), so re-running a finalized period is a no-op that
returns the run that finalized it.

Late usage, exactly once: each run's scope starts where the last finalized run (of any
period) stopped (`rating.Cutoff`). A run's watermark is never below that run's, so the
finalized runs' late ranges tile the ledger without gaps or overlaps.

Grace: a period can be finalized only `BILLING_FINALIZE_GRACE_HOURS` after it ends, so usage
that arrives a little late still lands on its own month's invoice; after that it is late
usage on the next finalized invoice, priced at its own month's prices.
"""

from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import NamedTuple

from django.conf import settings
from django.db import connections, transaction
from django.db.models import Max
from django.utils import timezone

from billing.models import (
    Adjustment,
    BillingRun,
    Invoice,
    InvoiceCounter,
    InvoiceLine,
    InvoiceStatus,
    UsageDispute,
    UsageEvent,
)
from billing.notifications import invoices_finalized
from billing.periods import format_period, period_end, period_of, previous_period
from billing.selectors import archived_periods
from billing.services.disputes import hold_disputed_usage
from billing.services.energy_lines import with_energy_lines
from billing.services.rating import (
    Cutoff,
    PriceBook,
    RatedLine,
    output_hash,
    rate_period,
    run_periods,
    run_spans,
    run_usage,
    tally_usage,
    usage_scope,
)
from billing.statement import DEFAULT_PAYMENT_TERMS_DAYS, seller
from core import clock
from core.bulk import copy_values, update_values
from core.collector import collector_paused
from core.faults import fault_point
from core.ids import uuid7s
from core.locks import advisory_lock
from core.search import index_objects
from core.services.audit import record_audit
from tenants.models import Tenant

LEDGER = "ledger"


class BillingRunError(Exception):
    """A run that must not happen; `code` is the API's problem code."""

    def __init__(self, code: str, detail: str):
        super().__init__(detail)
        self.code = code
        self.detail = detail


@dataclass(frozen=True)
class RunOutcome:
    run: BillingRun
    created: bool  # False: the period was already finalized and nothing changed


def safe_watermarks() -> tuple[int, int]:
    """Highest usage-event and adjustment ids such that every lower id is committed.

    On PostgreSQL an id is drawn inside the inserting transaction, so a lower id may commit
    after a higher one. A SHARE lock waits for every in-flight insert to finish, and is held
    only for the two MAX reads (ingest pauses for milliseconds, not for the whole run).
    SQLite has one writer at a time, so MAX(id) is already safe there.
    """
    connection = connections[LEDGER]
    with transaction.atomic(using=LEDGER):
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("LOCK TABLE billing_usageevent, billing_adjustment IN SHARE MODE")
        events = UsageEvent.objects.using(LEDGER).aggregate(m=Max("id"))["m"] or 0
        adjustments = Adjustment.objects.using(LEDGER).aggregate(m=Max("id"))["m"] or 0
    return events, adjustments


def _finalized_run(period: date) -> BillingRun | None:
    return BillingRun.objects.using(LEDGER).filter(period=period, finalize=True).order_by("-started_at").first()


def _cutoff(watermark: int, adjustment_watermark: int) -> Cutoff:
    """The scope of a run reading the ledger up to these watermarks: everything above the last
    finalized run's watermarks. Runs hold the `billing_run` lock, so "last" is by finish time."""
    finalized = BillingRun.objects.using(LEDGER).filter(finalize=True)
    periods = frozenset(finalized.values_list("period", flat=True))
    prior = finalized.order_by("-finished_at").first()
    if prior is None:
        return Cutoff(watermark, adjustment_watermark, periods)
    # Never read below the last finalized run: the rows it saw are committed, and going lower
    # would bill its late range a second time.
    return Cutoff(
        max(watermark, prior.watermark),
        max(adjustment_watermark, prior.adjustment_watermark),
        periods,
        prior.watermark,
        prior.adjustment_watermark,
    )


def cutoff_of(run: BillingRun) -> Cutoff:
    """The scope a finalized run billed, reproduced (to re-issue one of its invoices): its
    watermarks, the periods finalized before it, and the dispute decisions it saw."""
    periods = frozenset(
        BillingRun.objects.using(LEDGER)
        .filter(finalize=True, finished_at__lt=run.finished_at)
        .values_list("period", flat=True)
    )
    return Cutoff(
        run.watermark,
        run.adjustment_watermark,
        periods,
        run.prior_watermark,
        run.prior_adjustment_watermark,
        run.dispute_watermark,
        run.decision_watermark,
    )


def dispute_watermarks() -> tuple[int, int]:
    """(highest dispute id, highest decision number) now; read under the billing-run lock, which
    every dispute decision takes too."""
    found = UsageDispute.objects.using(LEDGER).aggregate(d=Max("id"), s=Max("decision_seq"))
    return found["d"] or 0, found["s"] or 0


def grace_ends(period: date) -> datetime:
    return period_end(period) + timedelta(hours=settings.BILLING_FINALIZE_GRACE_HOURS)


def _check_finalizable(period: date, now: datetime) -> None:
    if period_end(period) > now:
        raise BillingRunError(
            "period_open",
            f"{format_period(period)} has not ended yet; only past periods "
            "can be finalized. Run it without finalize to refresh the drafts.",
        )
    if grace_ends(period) > now:
        raise BillingRunError(
            "period_in_grace",
            f"{format_period(period)} is in its grace period for late usage "
            f"until {grace_ends(period):%Y-%m-%d %H:%M} UTC; finalize it after that.",
        )
    finalized = set(BillingRun.objects.using(LEDGER).filter(finalize=True).values_list("period", flat=True))
    open_earlier = min(
        (
            model.objects.using(LEDGER)
            .filter(period__lt=period)
            .exclude(period__in=finalized)
            .order_by("period")
            .values_list("period", flat=True)
            .first()
            for model in (UsageEvent, Adjustment)
        ),
        key=lambda p: (p is None, p),
    )
    if open_earlier is not None:
        raise BillingRunError(
            "earlier_period_open",
            f"{format_period(open_earlier)} has usage and is not "
            f"finalized; finalize it before {format_period(period)} (periods close in order).",
        )


# What a billing run writes of each invoice and line, in this order (attnames).
INVOICE_COLUMNS = tuple(f.attname for f in Invoice._meta.concrete_fields)
# A line row as the run writes it: its id, invoice and position, then the rated line's fields
# in RatedLine's order (every one of them is a column of the same name).
LINE_COLUMNS = ("id", "invoice_id", "position", *RatedLine._fields)


class WrittenInvoice(NamedTuple):  # one per tenant: a named tuple costs a third of a dataclass
    id: object
    tenant_id: object
    total: Decimal


def _write_invoices(period: date, rated: dict, run_id, currency: str) -> list[WrittenInvoice]:
    """The run's draft invoices and their lines, rewritten: one statement per kind of write,
    rows as plain tuples (no model instance per invoice or line: at 10,000 tenants building and
    preparing them was most of a run's Python). A draft keeps its id (and its page's address);
    its lines are replaced."""
    drafts = dict(
        Invoice.objects.using(LEDGER)
        .select_for_update()
        .filter(period=period, status=InvoiceStatus.DRAFT)
        .values_list("tenant_id", "id")
    )
    # One statement (drafts' lines are never referenced: credit notes are for finalized invoices,
    # and the foreign key would refuse it); Django's delete() first reads every line and its
    # credit-note references, seconds at 10,000 tenants.
    with connections[LEDGER].cursor() as cursor:
        cursor.execute(
            "DELETE FROM billing_invoiceline WHERE invoice_id IN "
            "(SELECT id FROM billing_invoice WHERE period = %s AND status = %s)",
            [connections[LEDGER].ops.adapt_datefield_value(period), InvoiceStatus.DRAFT],
        )
    stale = [pk for tenant, pk in drafts.items() if tenant not in rated]
    if stale:
        Invoice.objects.using(LEDGER).filter(pk__in=stale).delete()
    now = clock.now()
    tenants = sorted(rated, key=str)
    new_ids = iter(uuid7s(sum(1 for tenant in tenants if tenant not in drafts)))
    line_ids = iter(uuid7s(sum(len(rated[tenant]) for tenant in tenants)))
    # A new draft's row: the model's defaults, then what the run sets (positions in INVOICE_COLUMNS).
    template = [f.get_default() if f.attname != "id" else None for f in Invoice._meta.concrete_fields]
    for name, value in (("period", period), ("currency", currency), ("billing_run_id", run_id)):
        template[INVOICE_COLUMNS.index(name)] = value
    template[INVOICE_COLUMNS.index("created_at")] = template[INVOICE_COLUMNS.index("updated_at")] = now
    at_id, at_tenant, at_total = (INVOICE_COLUMNS.index(name) for name in ("id", "tenant_id", "total"))
    written, new, totals, lines = [], [], [], []
    for tenant_id in tenants:
        tenant_lines = rated[tenant_id]
        total = sum((line.amount for line in tenant_lines), Decimal("0.00"))
        invoice_id = drafts.get(tenant_id)
        if invoice_id is None:
            invoice_id = next(new_ids)
            row = template.copy()
            row[at_id], row[at_tenant], row[at_total] = invoice_id, tenant_id, total
            new.append(row)
        else:
            totals.append((invoice_id, total))
        written.append(WrittenInvoice(invoice_id, tenant_id, total))
        # Amounts, quantities and prices are already exact at their columns' places (rating
        # quantizes them), so they go as they are, not through each field's preparation.
        lines.extend((next(line_ids), invoice_id, position, *line) for position, line in enumerate(tenant_lines, 1))
    copy_values(Invoice, INVOICE_COLUMNS, new, using=LEDGER, binary=True)
    update_values(Invoice, ["total"], totals, shared={"billing_run_id": run_id, "updated_at": now}, using=LEDGER)
    copy_values(InvoiceLine, LINE_COLUMNS, lines, using=LEDGER, binary=True)
    return written


def line_rows(invoice: Invoice, rated_lines) -> list[InvoiceLine]:
    return [
        InvoiceLine(
            invoice=invoice,
            position=i + 1,
            kind=r.kind,
            sku=r.sku,
            description=r.description,
            usage_period=r.usage_period,
            quantity=r.quantity,
            quantity_micro=r.quantity_micro,
            unit=r.unit,
            unit_price=r.unit_price,
            rate=r.rate,
            price_version=r.price_version,
            start=r.start,
            end=r.end,
            amount=r.amount,
            note=r.note,
            reference=r.reference,
        )
        for i, r in enumerate(rated_lines)
    ]


def number_documents(issuer: str, count: int, *, series: str = "") -> list[str]:
    """`count` gapless numbers of one issuer's series (the counter row is locked; call inside
    the transaction that writes the documents)."""
    key = f"{issuer}:{series}" if series else issuer
    InvoiceCounter.objects.using(LEDGER).get_or_create(issuer=key)
    counter = InvoiceCounter.objects.using(LEDGER).select_for_update().get(issuer=key)
    prefix = f"{issuer.upper()}-{series.upper()}-" if series else f"{issuer.upper()}-"
    numbers = [f"{prefix}{counter.last_number + i + 1:06d}" for i in range(count)]
    counter.last_number += count
    counter.save(update_fields=["last_number"])
    return numbers


def _finalize(written: list[WrittenInvoice], period: date, issuer: str, now: datetime) -> None:
    """Gapless numbers: the counter row is locked and advanced in the run's transaction."""
    if not written:
        return
    terms = issue_terms({invoice.tenant_id for invoice in written}, now)
    parties = issue_parties({invoice.tenant_id for invoice in written})
    numbers = number_documents(issuer, len(written))
    update_values(
        Invoice,
        ["number", "tax_rate_percent", "due_on", *PARTY_FIELDS],
        [
            (w.id, number, *terms[w.tenant_id], *(parties[w.tenant_id][f] for f in PARTY_FIELDS))
            for w, number in zip(written, numbers, strict=True)
        ],
        shared={"status": InvoiceStatus.FINALIZED, "finalized_at": now, "updated_at": now, "issuer": issuer},
        using=LEDGER,
    )
    # each tenant hears of its invoice once the ledger commits (billing.notifications)
    invoices_finalized(
        (w.id, w.tenant_id, number, period, w.total, terms[w.tenant_id][1])
        for w, number in zip(written, numbers, strict=True)
    )
    # numbers are searchable once the ledger commits (core.search.index)
    index_objects(
        [
            Invoice(
                id=w.id,
                tenant_id=w.tenant_id,
                period=period,
                number=number,
                status=InvoiceStatus.FINALIZED,
                issuer=issuer,
                total=w.total,
                finalized_at=now,
                updated_at=now,
            )
            for w, number in zip(written, numbers, strict=True)
        ]
    )


PARTY_FIELDS = ("seller_name", "seller_address", "seller_tax_id", "bill_to_name", "bill_to_address", "bill_to_tax_id")


def issue_parties(tenant_ids) -> dict:
    """tenant id → {Invoice field: value} of the seller (settings) and the bill-to (the tenant's
    billing profile) as they are now, frozen onto its invoices at issue so a later change of
    address or tax id never rewrites an issued invoice. A tenant the control plane does not
    know is billed to its id, as the document shows it."""
    issuer = seller()
    ours = {
        "seller_name": issuer.name,
        "seller_address": "\n".join(issuer.address_lines),
        "seller_tax_id": issuer.tax_id,
    }
    profiles = {
        pk: (legal_name or name, address, tax_id)
        for pk, legal_name, name, address, tax_id in Tenant.objects.filter(pk__in=set(tenant_ids)).values_list(
            "pk", "legal_name", "name", "billing_address", "tax_id"
        )
    }
    out = {}
    for tenant_id in tenant_ids:
        name, address, tax_id = profiles.get(tenant_id, (str(tenant_id), "", ""))
        lines = [row.strip() for row in address.splitlines() if row.strip()]
        out[tenant_id] = {**ours, "bill_to_name": name, "bill_to_address": "\n".join(lines), "bill_to_tax_id": tax_id}
    return out


def issue_terms(tenant_ids, now: datetime) -> dict:
    """tenant id → (tax rate in percent, due date) from each tenant's billing profile, frozen onto
    its invoices at issue. A tenant the control plane does not know (usage held for it) pays no
    tax and has the default 30 days."""
    profiles = {
        pk: (rate, days)
        for pk, rate, days in Tenant.objects.filter(pk__in=set(tenant_ids)).values_list(
            "pk", "tax_rate_percent", "payment_terms_days"
        )
    }
    default = (Decimal("0.00"), DEFAULT_PAYMENT_TERMS_DAYS)
    return {
        tenant_id: (
            profiles.get(tenant_id, default)[0],
            (now + timedelta(days=profiles.get(tenant_id, default)[1])).date(),
        )
        for tenant_id in tenant_ids
    }


# What the run's scans of the month are planned with on PostgreSQL (setting → value).
SCAN_SETTINGS = {
    # Enough memory to hash the month's groups: at the default 4 MB the planner sorted the
    # month's rows on disk instead (0.6 s against 0.4 s hashed, 416,666 rows at 10,000 tenants,
    # measured with the wider grouping by allocation and node as well).
    # Runs hold the `billing_run` lock, so one at a time takes it; past 64 MB a hash aggregate
    # spills to disk rather than fail.
    "work_mem": "64MB",
    # Rows handed from parallel workers to the leader cost nothing. A run with finalized
    # months behind it groups its rows by tenant, month and SKU; with no statistics of the
    # partitioned parent (autovacuum never analyzes one) the planner takes 200 values for
    # each, estimates the groups at its cap of one per ten rows, and at that estimate workers
    # would hand on nearly every row they read: it hashed the month in one process. Measured
    # on the 50 M benchmark with the wider grouping this replaced (by allocation and node too):
    # 1.4–1.9 s in one process, 0.85–0.93 s in three, the raw aggregate's plan. A group is a
    # tenant's SKU for a month, so what workers hand on is a small fraction of what they read.
    "parallel_tuple_cost": "0",
}


@contextmanager
def scans_planned_for_few_groups():
    """PostgreSQL: `SCAN_SETTINGS` for the statements inside, then the values from before
    (the run's writes and its other reads are planned as everywhere else). The settings are
    the transaction's (`set_config(…, true)`): after an error they end with its rollback."""
    connection = connections[LEDGER]
    if connection.vendor != "postgresql":
        yield
        return
    before = {}
    with connection.cursor() as cursor:
        for name, value in SCAN_SETTINGS.items():
            cursor.execute("SELECT current_setting(%s), set_config(%s, %s, true)", [name, name, value])
            before[name] = cursor.fetchone()[0]
    yield
    with connection.cursor() as cursor:
        for name, value in before.items():
            cursor.execute("SELECT set_config(%s, %s, true)", [name, value])


def run_billing(*, period: date, finalize: bool, actor: str, now: datetime | None = None) -> RunOutcome:
    """Rate `period` into draft invoices (and finalize them when `finalize`). Atomic."""
    now = now or clock.now()
    started_at = timezone.now()
    watermark, adjustment_watermark = safe_watermarks()
    with (
        collector_paused(),  # the run's ~10^5 live rows and lines made full collections cost 0.45 s of CPU
        transaction.atomic(using=LEDGER),
        advisory_lock("billing_run", using=LEDGER) as acquired,
    ):
        if not acquired:
            raise BillingRunError("billing_run_in_progress", "Another billing run is in progress; retry in a minute.")
        done = _finalized_run(period)
        if done is not None:
            return RunOutcome(done, created=False)
        if period in archived_periods():
            raise BillingRunError(
                "period_archived",
                f"{format_period(period)} is archived: its usage left the ledger. Restore it first "
                "(manage.py archive_ledger_month --restore).",
            )
        if finalize:
            _check_finalizable(period, now)
        book = PriceBook.load()
        # The run records the highest version in force during the period; lines carry their own.
        version = book.version_at(period_end(period) - timedelta(microseconds=1)) or 0
        cutoff = _cutoff(watermark, adjustment_watermark)
        # Reconcile first: usage the allocation history contradicts is held, not rated. The
        # pairs to compare come from the spans the database keeps, not from the rows.
        disputed = hold_disputed_usage(scope=usage_scope(period, cutoff), now=now, spans=run_spans(period, cutoff))
        # Freeze the dispute decisions this run sees, so a re-issue re-rates the same rows.
        held_through, decided_through = dispute_watermarks()
        cutoff = replace(cutoff, dispute_watermark=held_through, decision_watermark=decided_through)
        # One scan of the run's usage, grouped like the raw aggregate of the month, for the rating.
        with scans_planned_for_few_groups():
            tally = tally_usage(run_usage(period, cutoff), book, periods=run_periods(period, cutoff), cut=cutoff)
        rated = with_energy_lines(
            rate_period(period=period, cutoff=cutoff, book=book, tally=tally), period=period, book=book
        )
        digest = output_hash(period=period, price_book_version=version, rated=rated)
        run = BillingRun(
            period=period,
            finalize=finalize,
            price_book_version=version,
            watermark=cutoff.watermark,
            adjustment_watermark=cutoff.adjustment_watermark,
            prior_watermark=cutoff.prior_watermark,
            prior_adjustment_watermark=cutoff.prior_adjustment_watermark,
            dispute_watermark=cutoff.dispute_watermark,
            decision_watermark=cutoff.decision_watermark,
            invoices=len(rated),
            output_hash=digest,
            actor=actor,
            started_at=started_at,
        )
        written = _write_invoices(period, rated, run.id, currency="USD")
        fault_point("billing.after_write")  # the fault suite kills the worker here (uncommitted)
        if finalize:
            _finalize(written, period, settings.BILLING_ISSUER, now)
        run.finished_at = timezone.now()
        run.save(using=LEDGER, force_insert=True)
    record_audit(
        actor=actor,
        action="billing.run",
        target=run,
        reason="finalize" if finalize else "draft refresh",
        after={
            "period": format_period(period),
            "invoices": run.invoices,
            "watermark": watermark,
            "disputes_opened": disputed,
            "output_hash": digest,
            "price_book_version": version,
        },
    )
    return RunOutcome(run, created=True)


def due_finalizations(*, now: datetime) -> list[date]:
    """Past periods with usage or adjustments, not yet finalized, whose grace period has passed (oldest first)."""
    finalized = set(BillingRun.objects.using(LEDGER).filter(finalize=True).values_list("period", flat=True))
    # A month with only adjustments (a manual charge, say) is invoiced like one with usage.
    periods = set(UsageEvent.objects.using(LEDGER).values_list("period", flat=True).distinct())
    periods |= set(Adjustment.objects.using(LEDGER).values_list("period", flat=True).distinct())
    return sorted(p for p in periods - finalized if grace_ends(p) <= now)


def refresh_drafts(*, now: datetime, actor: str) -> list[RunOutcome]:
    """Hourly: re-rate the current month's drafts (and last month's while it is in grace)."""
    current = period_of(now)
    periods = [current]
    if _finalized_run(previous_period(current)) is None:
        periods.insert(0, previous_period(current))
    return [run_billing(period=p, finalize=False, actor=actor, now=now) for p in periods]


def finalize_due(*, now: datetime, actor: str) -> list[RunOutcome]:
    """Monthly close: finalize every past period whose grace has passed, in order."""
    return [run_billing(period=p, finalize=True, actor=actor, now=now) for p in due_finalizations(now=now)]
