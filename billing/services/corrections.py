"""Corrections to finalized invoices, as documents: credit notes, and void → re-issue.

Nothing is edited. A credit note is a new numbered document (its own gapless series,
`HANGAR-CN-000001`) naming the invoice and the lines it credits; what all credit notes
credit on one line never exceeds what the line billed. Re-issuing voids a finalized invoice
and, in the same transaction, issues a new invoice with a new number for exactly the same
usage: the ledger scope of the billing run that produced the voided one, re-rated (so a
price-book correction is applied; with nothing changed the lines come out identical). The
usage is therefore billed on exactly one live invoice at every moment.
"""

from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from billing.models import BillingRun, CreditNote, CreditNoteLine, Invoice, InvoiceLine, InvoiceStatus, LineKind
from billing.notifications import credit_note_issued, invoices_finalized
from billing.services.credits import require_operator
from billing.services.rating import PriceBook, RatedLine, rate_period
from billing.services.runs import (
    PARTY_FIELDS,
    BillingRunError,
    cutoff_of,
    issue_parties,
    issue_terms,
    line_rows,
    number_documents,
)
from core.locks import advisory_lock
from core.services.audit import record_audit

LEDGER = "ledger"
MAX_REASON = 2000
CENT = Decimal("0.01")


class CorrectionError(Exception):
    """A correction that must not happen; `code` is the API's problem code."""

    def __init__(self, code: str, detail: str, *, status: int = 409, errors: list[dict] | None = None):
        super().__init__(detail)
        self.code = code
        self.detail = detail
        self.status = status
        self.errors = errors


def _reason(reason: str) -> str:
    reason = (reason or "").strip()
    if not reason or len(reason) > MAX_REASON:
        raise CorrectionError(
            "validation_error",
            f"give a reason of 1 to {MAX_REASON} characters; it is printed on the document",
            status=400,
        )
    return reason


@dataclass(frozen=True)
class CreditRequest:
    position: int
    amount: Decimal


def credited_so_far(line_ids) -> dict:
    """invoice line id → amount already credited by credit notes (summed as Decimals, not in SQL)."""
    out: dict = {}
    for line_id, amount in (
        CreditNoteLine.objects.using(LEDGER)
        .filter(invoice_line_id__in=list(line_ids))
        .values_list("invoice_line_id", "amount")
    ):
        out[line_id] = out.get(line_id, Decimal("0.00")) + amount
    return out


def credit_note_tax(invoice: Invoice, total: Decimal, credited_net: Decimal, credited_tax: Decimal):
    """(rate, tax) of a credit note of `total` (before tax) on `invoice`, after earlier notes
    crediting `credited_net` and `credited_tax`: the invoice's frozen rate × total, half-even to
    the cent; the note that brings the credits to the invoice's whole net gives back exactly the
    tax that is left, so a full refund leaves 0.00 due, never a cent of rounding."""
    rate = invoice.tax_rate_percent or Decimal("0.00")
    invoice_tax = (invoice.total * rate / 100).quantize(CENT, rounding=ROUND_HALF_EVEN)
    if credited_net + total >= invoice.total:
        return rate, invoice_tax - credited_tax
    tax = (total * rate / 100).quantize(CENT, rounding=ROUND_HALF_EVEN)
    return rate, min(tax, invoice_tax - credited_tax)


@transaction.atomic(using=LEDGER)
def issue_credit_note(*, by, invoice_id, requests: list[CreditRequest], reason: str) -> CreditNote:
    actor = require_operator(by, "credit_note.create")
    reason = _reason(reason)
    invoice = Invoice.objects.using(LEDGER).select_for_update().filter(pk=invoice_id).first()
    if invoice is None:
        raise CorrectionError("not_found", "No such invoice.", status=404)
    if invoice.status != InvoiceStatus.FINALIZED:
        raise CorrectionError(
            "invoice_not_finalized",
            f"Invoice is {invoice.status}: credit notes apply to finalized invoices (a draft is simply re-rated).",
        )
    if not requests or len(requests) > 500:
        raise CorrectionError("validation_error", "name 1 to 500 lines to credit", status=400)
    lines = {line.position: line for line in InvoiceLine.objects.using(LEDGER).filter(invoice=invoice)}
    already = credited_so_far(line.pk for line in lines.values())
    seen, errors = set(), []
    for i, request in enumerate(requests):
        line = lines.get(request.position)
        if line is None or request.position in seen:
            errors.append({"field": f"lines[{i}].position", "message": "no such line on this invoice, or named twice"})
            continue
        seen.add(request.position)
        room = line.amount - already.get(line.pk, Decimal("0.00"))
        if request.amount <= 0 or request.amount != request.amount.quantize(Decimal("0.01")):
            errors.append({"field": f"lines[{i}].amount", "message": "a positive amount with at most 2 decimals"})
        elif request.amount > room:
            errors.append(
                {
                    "field": f"lines[{i}].amount",
                    "message": f"at most {max(room, Decimal('0.00'))}: what the line billed, less earlier credit notes",
                }
            )
    # Together the credit notes never credit more than the invoice's net (its charges less its
    # credits), so an invoice never ends below zero; tax goes back in the same proportion.
    earlier = list(CreditNote.objects.using(LEDGER).filter(invoice=invoice).values_list("total", "tax"))
    credited_net = sum((total for total, _ in earlier), Decimal("0.00"))
    credited_tax = sum((tax or Decimal("0.00") for _, tax in earlier), Decimal("0.00"))
    asked = sum((r.amount for r in requests if r.amount > 0), Decimal("0.00"))
    if not errors and credited_net + asked > invoice.total:
        errors.append(
            {
                "field": "lines",
                "message": f"at most {max(invoice.total - credited_net, Decimal('0.00'))} in all: the invoice's net "
                f"({invoice.total}) less earlier credit notes ({credited_net})",
            }
        )
    if errors:
        raise CorrectionError(
            "credit_exceeds_line",
            "A credit note credits at most what each line billed; see errors.",
            status=400,
            errors=errors,
        )
    number = number_documents(settings.BILLING_ISSUER, 1, series="cn")[0]
    total = sum((r.amount for r in requests), Decimal("0.00"))
    rate, tax = credit_note_tax(invoice, total, credited_net, credited_tax)
    note = CreditNote.objects.using(LEDGER).create(
        number=number,
        issuer=settings.BILLING_ISSUER,
        tenant_id=invoice.tenant_id,
        invoice=invoice,
        currency=invoice.currency,
        total=total,
        tax_rate_percent=rate,
        tax=tax,
        reason=reason,
        actor=actor,
        issued_at=timezone.now(),
    )
    CreditNoteLine.objects.using(LEDGER).bulk_create(
        [
            CreditNoteLine(
                credit_note=note,
                position=i + 1,
                invoice_line=lines[r.position],
                amount=r.amount,
                description=f"credit on {invoice.number} line {r.position}: {lines[r.position].description}"[:300],
            )
            for i, r in enumerate(requests)
        ]
    )
    record_audit(
        actor=actor,
        action="billing.credit_note",
        target=note,
        reason=reason,
        after={
            "number": number,
            "invoice": invoice.number,
            "total": str(note.total),
            "tax": str(note.tax),
            "lines": {str(r.position): str(r.amount) for r in requests},
        },
    )
    credit_note_issued(note)
    return note


def _energy_lines_of(invoice: Invoice) -> list[RatedLine]:
    return [
        RatedLine(
            kind=line.kind,
            sku=line.sku,
            description=line.description,
            usage_period=line.usage_period,
            quantity=line.quantity,
            unit=line.unit,
            unit_price=line.unit_price,
            amount=line.amount,
            reference=line.reference,
            quantity_micro=line.quantity_micro,
            rate=line.rate,
            price_version=line.price_version,
            start=line.start,
            end=line.end,
            note=line.note,
        )
        for line in invoice.lines.filter(kind=LineKind.ENERGY).order_by("position")
    ]


def reissue_invoice(*, by, invoice_id, reason: str) -> Invoice:
    """Void a finalized invoice and issue its replacement (new number, same usage). Atomic."""
    actor = require_operator(by, "invoice.reissue")
    reason = _reason(reason)
    now = timezone.now()
    with transaction.atomic(using=LEDGER), advisory_lock("billing_run", using=LEDGER) as acquired:
        if not acquired:
            raise BillingRunError("billing_run_in_progress", "A billing run is in progress; retry in a minute.")
        old = Invoice.objects.using(LEDGER).select_for_update().filter(pk=invoice_id).first()
        if old is None:
            raise CorrectionError("not_found", "No such invoice.", status=404)
        if old.status != InvoiceStatus.FINALIZED:
            raise CorrectionError(
                "invoice_not_finalized",
                f"Invoice is {old.status}: only a finalized invoice can be voided and re-issued.",
            )
        if CreditNote.objects.using(LEDGER).filter(invoice=old).exists():
            raise CorrectionError(
                "invoice_has_credit_notes",
                f"{old.number} has credit notes; correct it with another credit note instead of re-issuing it.",
            )
        run = BillingRun.objects.using(LEDGER).filter(pk=old.billing_run_id, finalize=True).first()
        if run is None:
            raise CorrectionError(
                "no_billing_run",
                f"{old.number} was not produced by a billing run, so its usage "
                "cannot be re-rated; issue a credit note instead.",
            )
        old.status, old.void_reason, old.voided_at, old.voided_by, old.updated_at = (
            InvoiceStatus.VOID,
            reason,
            now,
            actor,
            now,
        )
        old.save(using=LEDGER, update_fields=["status", "void_reason", "voided_at", "voided_by", "updated_at"])
        book = PriceBook.load()
        rated = rate_period(period=old.period, cutoff=cutoff_of(run), book=book, tenant_ids=[old.tenant_id]).get(
            old.tenant_id, []
        )
        # Energy is part of the frozen scope: the kWh come from the control plane's energy
        # record, which keeps changing (late readings), so the replacement carries the original's
        # energy lines as they were billed instead of reading energy again.
        rated = [*rated, *_energy_lines_of(old)]
        new = Invoice(
            tenant_id=old.tenant_id,
            period=old.period,
            currency=old.currency,
            issuer=old.issuer,
            billing_run_id=run.pk,
            replaces=old,
            total=sum((line.amount for line in rated), Decimal("0.00")),
        )
        new.save(using=LEDGER, force_insert=True)
        InvoiceLine.objects.using(LEDGER).bulk_create(line_rows(new, rated))
        new.number = number_documents(old.issuer, 1)[0]
        new.status, new.finalized_at, new.updated_at = InvoiceStatus.FINALIZED, now, now
        # The re-issue keeps the original's tax rate (same usage, same terms); it is due anew.
        rate, new.due_on = issue_terms([old.tenant_id], now)[old.tenant_id]
        new.tax_rate_percent = old.tax_rate_percent if old.tax_rate_percent is not None else rate
        # A re-issue is a new document: it names the parties as they are now (a corrected
        # address is the usual reason to re-issue), frozen from here on like any invoice's.
        for name, value in issue_parties([old.tenant_id])[old.tenant_id].items():
            setattr(new, name, value)
        new.save(
            using=LEDGER,
            update_fields=[
                "number",
                "status",
                "finalized_at",
                "updated_at",
                "tax_rate_percent",
                "due_on",
                *PARTY_FIELDS,
            ],
        )
        invoices_finalized([(new.pk, new.tenant_id, new.number, new.period, new.total, new.due_on)])
    record_audit(
        actor=actor,
        action="billing.invoice_reissue",
        target=new,
        reason=reason,
        before={"number": old.number, "total": str(old.total)},
        after={"number": new.number, "total": str(new.total), "replaces": old.number},
    )
    return new
