"""Billing console and tenant portal pages; the usage chart as data."""

import uuid
from datetime import date, timedelta
from decimal import Decimal

import pytest
from django.db import connections
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from billing.charts import daily_gpu_hours_figure
from billing.models import Invoice
from billing.services.runs import run_billing

from .conftest import LEDGER_DBS, make_event

pytestmark = pytest.mark.django_db(databases=LEDGER_DBS)


@pytest.fixture
def member_client(client, tenants, django_user_model):
    from tenants.models import Membership

    user = django_user_model.objects.create_user("alice", password="alice-pass-123")
    Membership.objects.create(tenant=tenants[0], user=user, role="member")
    client.force_login(user)
    return client


def _bill_now(ingest, tenant, n=3):
    now = timezone.now()
    ingest([make_event(tenant_id=tenant.pk, start=now - timedelta(hours=2, minutes=i)) for i in range(n)])
    run_billing(period=date(now.year, now.month, 1), finalize=False, actor="test")


def test_chart_is_daily_stacked_gpu_hours_with_zero_days():
    daily = {"h100-sxm-8x": {date(2026, 9, 2): Decimal("16")}, "a100-sxm-8x": {date(2026, 9, 1): Decimal("1.5")}}
    figure = daily_gpu_hours_figure(daily, start=date(2026, 9, 1), end=date(2026, 9, 4))
    assert [trace.name for trace in figure.data] == ["a100-sxm-8x", "h100-sxm-8x"]
    assert list(figure.data[1].x) == ["2026-09-01", "2026-09-02", "2026-09-03"]
    assert list(figure.data[1].y) == [0, 16, 0] and list(figure.data[0].y) == [1.5, 0, 0]
    assert figure.layout.barmode == "stack"


def test_portal_usage_and_invoices(member_client, tenants, ingest):
    _bill_now(ingest, tenants[0])
    usage = member_client.get("/portal/usage/")
    assert usage.status_code == 200 and b"h100-sxm-8x" in usage.content and b"plotly.min.js" in usage.content
    assert b"Standard SLA (v1)" in usage.content and b"a replacement ends it" in usage.content  # the policy, shown
    listing = member_client.get("/portal/invoices/")
    invoice = Invoice.objects.get(tenant_id=tenants[0].pk)
    assert listing.status_code == 200 and b"upcoming (draft)" in listing.content
    detail = member_client.get(f"/portal/invoices/{invoice.pk}/")
    assert detail.status_code == 200 and str(invoice.total).encode() in detail.content
    csv = member_client.get(f"/portal/invoices/{invoice.pk}.csv")
    assert csv.status_code == 200 and csv["Content-Type"].startswith("text/csv")


def test_portal_hides_other_tenants_invoices(member_client, tenants, ingest):
    _bill_now(ingest, tenants[1])
    other = Invoice.objects.get(tenant_id=tenants[1].pk)
    assert member_client.get(f"/portal/invoices/{other.pk}/").status_code == 404
    assert member_client.get(f"/portal/invoices/{other.pk}.csv").status_code == 404
    assert member_client.get(f"/portal/invoices/{uuid.uuid4()}/").status_code == 404
    assert member_client.get("/portal/invoices/garbage/").status_code == 404
    assert str(other.total).encode() not in member_client.get("/portal/invoices/").content


def test_portal_needs_a_membership(client, django_user_model):
    client.force_login(django_user_model.objects.create_user("nobody", password="nobody-pass-1"))
    assert client.get("/portal/invoices/").status_code == 403
    client.logout()
    assert client.get("/portal/usage/").status_code == 302


@pytest.mark.parametrize("path", ["/portal/invoices/", "/portal/usage/", "/billing/"])
def test_page_query_counts_are_fixed(member_client, operator_user, tenants, ingest, path):
    web = member_client
    if path == "/billing/":
        web = Client()
        web.force_login(operator_user)

    def counts():
        with CaptureQueriesContext(connections["default"]) as d, CaptureQueriesContext(connections["ledger"]) as l:
            assert web.get(path).status_code == 200
        return len(d), len(l)

    _bill_now(ingest, tenants[0], n=1)
    small = counts()
    for _ in range(3):
        _bill_now(ingest, tenants[0], n=20)
        _bill_now(ingest, tenants[1], n=20)
    assert counts() == small


def test_operator_page_lists_runs_and_tenants(operator_user, tenants, ingest, member_client):
    _bill_now(ingest, tenants[0])
    operator = Client()
    operator.force_login(operator_user)
    page = operator.get("/billing/")
    assert page.status_code == 200 and b"acme" in page.content and b"draft" in page.content
    assert member_client.get("/billing/").status_code == 403  # not staff: the 403 page points to the portal


def test_portal_invoice_shows_reproducible_lines_credit_notes_and_what_it_replaces(member_client, tenants, ingest):
    from datetime import UTC, datetime

    from billing.services.corrections import CreditRequest, issue_credit_note, reissue_invoice

    class Operator:
        is_authenticated = is_staff = is_active = True
        actor = "test:operator"

        def has_perm(self, perm):
            return True

    ingest([make_event(tenant_id=tenants[0].pk, start=datetime(2026, 9, 3, tzinfo=UTC), seconds=3600)])
    run_billing(period=date(2026, 9, 1), finalize=True, actor="test", now=datetime(2026, 12, 1, tzinfo=UTC))
    old = Invoice.objects.get()
    new = reissue_invoice(by=Operator(), invoice_id=old.pk, reason="wrong PO number")
    issue_credit_note(by=Operator(), invoice_id=new.pk, reason="goodwill", requests=[CreditRequest(1, Decimal("1.00"))])
    page = member_client.get(f"/portal/invoices/{new.pk}/").content.decode()
    assert "HANGAR-000002" in page and "Replaces" in page and "HANGAR-000001" in page
    assert "Credit note HANGAR-CN-000001" in page and "goodwill" in page
    assert "8.00 GPU-h" in page and "2.35 USD / GPU-h" in page and "18.80 USD" in page  # for people
    exact = member_client.get(f"/portal/invoices/{new.pk}.csv").content.decode()
    assert "28800.000000" in exact and "2.350000" in exact  # GPU-seconds × price ÷ 3600, in the export
    voided = member_client.get(f"/portal/invoices/{old.pk}/").content.decode()
    assert "wrong PO number" in voided
