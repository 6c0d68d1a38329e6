"""An invoice as a finance team reads it: who it is billed to, when it was issued and is due,
charges, credits, subtotal, tax and the total due. Pure: built from the invoice (with its lines)
and the tenant's billing profile; the page, the PDF and tests share it. The seller and bill-to
are the ones frozen on the invoice when it was finalized; a draft (and an invoice finalized
before they were recorded) shows today's settings and profile, and says so.

The ledger's `Invoice.total` is the net of all lines (charges less credits). Tax is that net ×
the rate frozen on the invoice when it was finalized (a draft shows the tenant's current rate),
rounded half-even to the cent like every line. Credit notes issued against it (each with its
tax) are listed under the total, and the balance due is the total less what they credit.
"""

from dataclasses import dataclass, field
from datetime import date, timedelta
from decimal import ROUND_HALF_EVEN, Decimal

from billing.models import Invoice, InvoiceLine, LineKind

CENT = Decimal("0.01")
DEFAULT_PAYMENT_TERMS_DAYS = 30


@dataclass(frozen=True)
class BillTo:
    name: str
    address_lines: list[str]
    tax_id: str


@dataclass(frozen=True)
class Seller:
    name: str
    address_lines: list[str]
    tax_id: str


def seller() -> Seller:
    """The issuer's identity, from settings (BILLING_SELLER_NAME, _ADDRESS with "|" between lines, _TAX_ID)."""
    from django.conf import settings

    address = [row.strip() for row in settings.BILLING_SELLER_ADDRESS.split("|") if row.strip()]
    return Seller(settings.BILLING_SELLER_NAME, address, settings.BILLING_SELLER_TAX_ID)


@dataclass(frozen=True)
class CreditLine:
    line: InvoiceLine
    gpu_minutes: Decimal  # exact GPU-time the credit covers
    unit_price: Decimal | None  # the list price per GPU-hour it is computed from
    rate: Decimal  # the share of that price credited (the SLA policy's credit rate)


@dataclass(frozen=True)
class InvoiceStatement:
    invoice: Invoice
    bill_to: BillTo
    issued_on: date | None
    due_on: date | None
    charges: list[InvoiceLine]
    credits: list[CreditLine]
    subtotal: Decimal
    credits_total: Decimal
    net: Decimal
    tax_rate_percent: Decimal
    tax: Decimal
    total_due: Decimal
    rate_is_provisional: bool = field(default=False)  # a draft: the rate may still change
    seller: Seller | None = None
    credit_notes: list = field(default_factory=list)  # the CreditNotes issued against it, oldest first
    credited: Decimal = Decimal("0.00")  # what they give back, tax included
    balance_due: Decimal = Decimal("0.00")  # total due less credited
    # seller and bill-to as recorded at finalization; False: today's settings and billing profile
    # (a draft, or an invoice finalized before the parties were recorded)
    parties_frozen: bool = False


def _lines(text: str | None) -> list[str]:
    return [row.strip() for row in (text or "").splitlines() if row.strip()]


def _is_credit(line: InvoiceLine) -> bool:
    return line.kind == LineKind.SLA_CREDIT or line.amount < 0


def invoice_statement(invoice: Invoice, tenant) -> InvoiceStatement:
    """`tenant`: the tenants.Tenant the invoice bills (its legal name, address, tax id, rate, terms)."""
    lines = list(invoice.lines.all())
    charges = [line for line in lines if not _is_credit(line)]
    credits = [
        CreditLine(
            line=line,
            gpu_minutes=Decimal(line.quantity_micro) / Decimal(60_000_000),
            unit_price=line.unit_price,
            rate=line.rate,
        )
        for line in lines
        if _is_credit(line)
    ]
    subtotal = sum((line.amount for line in charges), Decimal("0.00"))
    credits_total = sum((credit.line.amount for credit in credits), Decimal("0.00"))
    net = subtotal + credits_total
    frozen = invoice.tax_rate_percent is not None
    rate = invoice.tax_rate_percent if frozen else (tenant.tax_rate_percent if tenant else Decimal("0"))
    tax = (net * rate / 100).quantize(CENT, rounding=ROUND_HALF_EVEN)
    issued_on = invoice.finalized_at.date() if invoice.finalized_at else None
    due_on = invoice.due_on
    if due_on is None and issued_on is not None:
        terms = tenant.payment_terms_days if tenant else DEFAULT_PAYMENT_TERMS_DAYS
        due_on = issued_on + timedelta(days=terms)
    notes = sorted(invoice.credit_notes.all(), key=lambda note: (note.issued_at, note.number))
    credited = sum((note.total_including_tax for note in notes), Decimal("0.00"))
    parties_frozen = invoice.seller_name is not None
    if parties_frozen:  # as they were when it was finalized
        bill_to = BillTo(
            name=invoice.bill_to_name or "",
            address_lines=_lines(invoice.bill_to_address),
            tax_id=invoice.bill_to_tax_id or "",
        )
        issuer = Seller(invoice.seller_name, _lines(invoice.seller_address), invoice.seller_tax_id or "")
    else:  # a draft, or finalized before the parties were recorded: as they are today
        name = (tenant.legal_name or tenant.name) if tenant else str(invoice.tenant_id)
        address = _lines(tenant.billing_address if tenant else "")
        bill_to = BillTo(name=name, address_lines=address, tax_id=tenant.tax_id if tenant else "")
        issuer = seller()
    return InvoiceStatement(
        invoice=invoice,
        bill_to=bill_to,
        issued_on=issued_on,
        due_on=due_on,
        charges=charges,
        credits=credits,
        subtotal=subtotal,
        credits_total=credits_total,
        net=net,
        tax_rate_percent=rate,
        tax=tax,
        total_due=net + tax,
        rate_is_provisional=not frozen,
        seller=issuer,
        parties_frozen=parties_frozen,
        credit_notes=notes,
        credited=credited,
        balance_due=net + tax - credited,
    )
