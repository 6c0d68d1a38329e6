"""Billing's identifiers in the console search (core.search): invoice number. Invoices live in
the ledger database; the index (control plane) is written after the ledger commits
(core.search.index), and a hit shows the tenant from the control plane."""

from django.urls import reverse

from core.search import Described, Kind, register
from tenants.models import Tenant

from .models import Invoice, InvoiceStatus

LEDGER = "ledger"


def describe_invoices(ids: list[str]) -> dict[str, Described]:
    rows = list(
        Invoice.objects.using(LEDGER)
        .filter(pk__in=ids)
        .values("pk", "number", "tenant_id", "period", "status", "total", "currency")
    )
    slugs = dict(Tenant.objects.filter(pk__in={r["tenant_id"] for r in rows}).values_list("pk", "slug")) if rows else {}
    return {
        str(r["pk"]): Described(
            f"invoice {r['number']} ({slugs.get(r['tenant_id'], 'unknown tenant')})",
            reverse("billing:overview"),
            f"{InvoiceStatus(r['status']).label} · {r['period']:%Y-%m} · {r['total']} {r['currency']}",
        )
        for r in rows
    }


register(Invoice, kinds=[Kind("invoice_number", "Invoice number", "number")], describe=describe_invoices, using=LEDGER)
