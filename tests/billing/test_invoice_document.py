"""The invoice a finance team reads: bill-to, dates, lines × price = amount, subtotal, credits
explained, tax at the tenant's rate (frozen at issue), total due; page and PDF."""

import re
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest

from billing.models import Invoice
from billing.services.credits import record_manual_adjustment
from billing.services.runs import run_billing
from tenants.models import Membership

from .conftest import LEDGER_DBS, make_event

pytestmark = pytest.mark.django_db(databases=LEDGER_DBS)

SEP = date(2026, 9, 1)
NOW = datetime(2026, 10, 2, 12, tzinfo=UTC)


@pytest.fixture
def finance(client, tenants, django_user_model):
    tenant = tenants[0]
    tenant.legal_name, tenant.tax_id = "Acme Research GmbH", "DE123456789"
    tenant.billing_address = "Hauptstraße 1\n10115 Berlin\nGermany"
    tenant.tax_rate_percent, tenant.payment_terms_days = Decimal("19.00"), 14
    tenant.save()
    user = django_user_model.objects.create_user("fin", password="fin-pass-12345")
    Membership.objects.create(tenant=tenant, user=user, role="viewer")
    client.force_login(user)
    return client


def _issued_september(ingest, tenant, operator_user) -> Invoice:
    # 8 GPU-h × 2.35 = 18.80 and 4 GPU-h A100 × 1.50 = 6.00; a 2.50 credit
    ingest(
        [
            make_event(tenant_id=tenant.pk, start=datetime(2026, 9, 3, tzinfo=UTC), seconds=3600),
            make_event(tenant_id=tenant.pk, start=datetime(2026, 9, 4, tzinfo=UTC), seconds=1800, sku="a100-sxm-8x"),
        ]
    )
    record_manual_adjustment(by=operator_user, tenant_id=tenant.pk, period=SEP, amount="-2.50", reason="goodwill")
    run_billing(period=SEP, finalize=True, actor="test", now=NOW)
    return Invoice.objects.get(tenant_id=tenant.pk, period=SEP)


def _text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def test_invoice_page_adds_up_with_bill_to_dates_and_tax(finance, tenants, ingest, operator_user):
    invoice = _issued_september(ingest, tenants[0], operator_user)
    assert invoice.tax_rate_percent == Decimal("19.00") and invoice.due_on == date(2026, 10, 16)
    page = _text(finance.get(f"/portal/invoices/{invoice.pk}/").content.decode())
    assert "Acme Research GmbH Hauptstraße 1 10115 Berlin Germany" in page and "Tax id: DE123456789" in page
    assert f"Invoice {invoice.number}" in page
    assert "Issued 2026-10-02" in page and "Due 2026-10-16" in page and "2026-09-01 – 2026-09-30" in page
    assert "8.00 GPU-h 2.35 USD / GPU-h (v1) 18.80 USD" in page  # quantity × unit price = amount
    assert "4.00 GPU-h 1.50 USD / GPU-h (v1) 6.00 USD" in page
    assert "Subtotal 24.80 USD" in page and "Credits −2.50 USD" in page
    assert "Tax (19.00 % of 22.30 USD) 4.24 USD" in page  # 22.30 × 19 % = 4.237 → 4.24
    assert "Total due (tax included) 26.54 USD" in page
    assert invoice.total == Decimal("22.30")  # the ledger keeps the net, exact


def test_a_later_rate_change_does_not_change_an_issued_invoice(finance, tenants, ingest, operator_user):
    invoice = _issued_september(ingest, tenants[0], operator_user)
    tenants[0].tax_rate_percent = Decimal("25")
    tenants[0].save()
    page = _text(finance.get(f"/portal/invoices/{invoice.pk}/").content.decode())
    assert "Tax (19.00 % of 22.30 USD) 4.24 USD" in page


def test_draft_says_as_of_and_that_its_rate_is_provisional(finance, tenants, ingest):
    now = datetime.now(UTC)
    ingest([make_event(tenant_id=tenants[0].pk, start=now - timedelta(hours=2), seconds=3600)])
    run_billing(period=date(now.year, now.month, 1), finalize=False, actor="test")
    invoice = Invoice.objects.get(tenant_id=tenants[0].pk, status="draft")
    page = _text(finance.get(f"/portal/invoices/{invoice.pk}/").content.decode())
    assert "usage as of" in page and "not yet: a draft" in page
    assert "the rate is fixed when the invoice is issued" in page


@pytest.mark.pdf
def test_invoice_pdf_is_a_pdf_of_the_same_document_and_tenant_scoped(finance, tenants, ingest, operator_user, client):
    invoice = _issued_september(ingest, tenants[0], operator_user)
    response = finance.get(f"/portal/invoices/{invoice.pk}.pdf")
    assert response.status_code == 200 and response["Content-Type"] == "application/pdf"
    assert response.content.startswith(b"%PDF") and invoice.number in response["Content-Disposition"]
    other = _issued_other(ingest, tenants[1])
    assert finance.get(f"/portal/invoices/{other.pk}.pdf").status_code == 404


def test_without_pango_the_pdf_link_answers_503_saying_how_to_enable_pdfs(
    finance, tenants, ingest, operator_user, monkeypatch
):
    """The console runs without WeasyPrint's Pango (make demo on a bare laptop); only the PDF
    link says what is missing, as a problem, and the page still shows the document."""
    import fleet.pdf

    monkeypatch.setattr(fleet.pdf, "_weasyprint", None)
    monkeypatch.setattr(fleet.pdf, "_missing", f"{fleet.pdf.ENABLE_PDFS} (cannot load library 'pango-1.0-0')")
    invoice = _issued_september(ingest, tenants[0], operator_user)
    response = finance.get(f"/portal/invoices/{invoice.pk}.pdf")
    assert response.status_code == 503 and response["Content-Type"] == "application/problem+json"
    problem = response.json()
    assert problem["code"] == "pdf_unavailable" and "libpango-1.0-0" in problem["detail"]
    assert problem["type"].endswith("/problems/pdf_unavailable")
    assert finance.get(f"/portal/invoices/{invoice.pk}/").status_code == 200
    other = _issued_other(ingest, tenants[1])
    assert finance.get(f"/portal/invoices/{other.pk}.pdf").status_code == 404  # scoping comes first


def _issued_other(ingest, tenant) -> Invoice:
    ingest([make_event(tenant_id=tenant.pk, start=datetime(2026, 10, 3, tzinfo=UTC), seconds=3600)])
    run_billing(period=date(2026, 10, 1), finalize=False, actor="test", now=NOW)
    return Invoice.objects.get(tenant_id=tenant.pk, period=date(2026, 10, 1))


def _move_house(tenant, settings):
    """The tenant moves and renames, and the seller moves too, after the invoice was issued."""
    tenant.legal_name, tenant.tax_id = "Acme Research AG", "CHE-999.999.999"
    tenant.billing_address = "Bahnhofstrasse 9\n8001 Zürich\nSwitzerland"
    tenant.save()
    settings.BILLING_SELLER_NAME = "Hangar Cloud (new) Ltd"
    settings.BILLING_SELLER_ADDRESS = "2 New Road|London"
    settings.BILLING_SELLER_TAX_ID = "GB000000000"


@pytest.fixture
def seller_then(settings):
    settings.BILLING_SELLER_NAME = "Hangar Cloud Ltd"
    settings.BILLING_SELLER_ADDRESS = "1 Old Street|London EC1"
    settings.BILLING_SELLER_TAX_ID = "GB123456789"
    return settings


def test_a_later_address_change_does_not_change_an_issued_invoice(
    finance, tenants, ingest, operator_user, seller_then, acme_api
):
    """Issue 40, finding 10: the seller and bill-to were read from settings and the tenant's profile
    whenever the invoice was shown, so an address change rewrote past invoices."""
    invoice = _issued_september(ingest, tenants[0], operator_user)
    assert (invoice.bill_to_name, invoice.bill_to_address, invoice.bill_to_tax_id) == (
        "Acme Research GmbH",
        "Hauptstraße 1\n10115 Berlin\nGermany",
        "DE123456789",
    )
    assert (invoice.seller_name, invoice.seller_address, invoice.seller_tax_id) == (
        "Hangar Cloud Ltd",
        "1 Old Street\nLondon EC1",
        "GB123456789",
    )
    _move_house(tenants[0], seller_then)
    page = _text(finance.get(f"/portal/invoices/{invoice.pk}/").content.decode())
    assert "Acme Research GmbH Hauptstraße 1 10115 Berlin Germany" in page and "Tax id: DE123456789" in page
    assert "Hangar Cloud Ltd 1 Old Street London EC1 Tax id: GB123456789" in page
    assert "Zürich" not in page and "New Road" not in page
    assert "Seller and bill-to as recorded when the invoice was issued." in page
    body = acme_api.get(f"/api/v1/invoices/{invoice.pk}").json()
    assert body["parties_frozen"] is True
    assert body["bill_to"] == {
        "name": "Acme Research GmbH",
        "address_lines": ["Hauptstraße 1", "10115 Berlin", "Germany"],
        "tax_id": "DE123456789",
    }
    assert body["seller"] == {
        "name": "Hangar Cloud Ltd",
        "address_lines": ["1 Old Street", "London EC1"],
        "tax_id": "GB123456789",
    }
    # the PDF renders the same statement (billing/_invoice_document.html) as the page
    from billing.statement import invoice_statement

    statement = invoice_statement(Invoice.objects.get(pk=invoice.pk), tenants[0])
    assert statement.bill_to.name == "Acme Research GmbH" and statement.seller.tax_id == "GB123456789"


def test_the_database_refuses_to_rewrite_an_issued_invoices_parties(tenants, ingest, operator_user, seller_then):
    from django.db import DatabaseError, transaction

    invoice = _issued_september(ingest, tenants[0], operator_user)
    for field in ("bill_to_address", "seller_name"):
        with pytest.raises(DatabaseError), transaction.atomic(using="ledger"):
            Invoice.objects.filter(pk=invoice.pk).update(**{field: "rewritten"})
    assert Invoice.objects.get(pk=invoice.pk).bill_to_name == "Acme"  # no legal name: the name


def test_a_draft_shows_todays_parties_and_says_they_are_fixed_at_issue(finance, tenants, ingest, seller_then, acme_api):
    ingest([make_event(tenant_id=tenants[0].pk, start=datetime(2026, 9, 3, tzinfo=UTC), seconds=3600)])
    run_billing(period=SEP, finalize=False, actor="test", now=NOW)
    invoice = Invoice.objects.get(tenant_id=tenants[0].pk, period=SEP)
    assert invoice.seller_name is None and invoice.bill_to_name is None
    _move_house(tenants[0], seller_then)
    page = _text(finance.get(f"/portal/invoices/{invoice.pk}/").content.decode())
    assert "Acme Research AG Bahnhofstrasse 9 8001 Zürich Switzerland" in page and "Hangar Cloud (new) Ltd" in page
    assert "Seller and bill-to as they are today; fixed when the invoice is issued." in page
    assert acme_api.get(f"/api/v1/invoices/{invoice.pk}").json()["parties_frozen"] is False


def test_an_invoice_issued_before_parties_were_recorded_shows_todays_and_says_so(
    finance, tenants, ingest, operator_user, seller_then, monkeypatch
):
    import billing.services.runs as runs

    # as finalized before migration 0016: no parties on the row
    monkeypatch.setattr(
        runs, "issue_parties", lambda tenant_ids: {t: dict.fromkeys(runs.PARTY_FIELDS) for t in tenant_ids}
    )
    invoice = _issued_september(ingest, tenants[0], operator_user)
    assert invoice.status == "finalized" and invoice.seller_name is None
    page = _text(finance.get(f"/portal/invoices/{invoice.pk}/").content.decode())
    assert "Acme Research GmbH" in page and "Hangar Cloud Ltd" in page
    assert "this invoice was issued before they were recorded on it" in page


def test_a_reissue_names_the_parties_as_they_are_now(finance, tenants, ingest, operator_user, seller_then, ops_api):
    import uuid

    old = _issued_september(ingest, tenants[0], operator_user)
    _move_house(tenants[0], seller_then)
    response = ops_api.post(
        f"/api/v1/ops/invoices/{old.pk}/reissue",
        {"reason": "the tenant moved"},
        format="json",
        HTTP_IDEMPOTENCY_KEY=str(uuid.uuid4()),
    )
    assert response.status_code == 201, response.json()
    new = Invoice.objects.get(pk=response.json()["id"])
    assert (new.bill_to_name, new.bill_to_address, new.seller_name) == (
        "Acme Research AG",
        "Bahnhofstrasse 9\n8001 Zürich\nSwitzerland",
        "Hangar Cloud (new) Ltd",
    )
    old.refresh_from_db()  # the void original keeps what it was issued with
    assert (old.status, old.bill_to_name, old.seller_name) == ("void", "Acme Research GmbH", "Hangar Cloud Ltd")
