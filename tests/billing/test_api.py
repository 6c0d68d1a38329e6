"""Tenant billing API and the operator's billing runs: shapes, isolation, fixed query counts."""

import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.db import connections
from django.test.utils import CaptureQueriesContext

from billing.models import Invoice
from billing.services.runs import run_billing

from .conftest import LEDGER_DBS, make_event

pytestmark = pytest.mark.django_db(databases=LEDGER_DBS)
SEPT = datetime(2026, 9, 1, tzinfo=UTC)


def _bill(ingest, tenant, n=3, period=SEPT):
    ingest([make_event(tenant_id=tenant.pk, start=period + timedelta(days=1, minutes=i)) for i in range(n)])
    return run_billing(period=period.date(), finalize=False, actor="test")


def test_usage_by_sku(acme_api, tenants, ingest):
    acme, globex = tenants
    ingest(
        [make_event(tenant_id=acme.pk, start=SEPT + timedelta(minutes=i), seconds=3600) for i in range(2)]
        + [make_event(tenant_id=acme.pk, start=SEPT, sku="a100-sxm-8x", seconds=450)]
        + [make_event(tenant_id=globex.pk, start=SEPT)]
    )
    response = acme_api.get("/api/v1/usage", {"start": "2026-09-01T00:00:00Z", "end": "2026-10-01T00:00:00Z"})
    assert response.status_code == 200
    body = response.json()
    keys = ("sku", "quantity", "unit", "amount", "currency", "unit_price", "price_version")
    assert [{k: row[k] for k in keys} for row in body["results"]] == [
        {
            "sku": "a100-sxm-8x",
            "quantity": "1.000000",
            "unit": "gpu_hour",
            "amount": "1.50",
            "currency": "USD",
            "unit_price": "1.500000",
            "price_version": 1,
        },
        {
            "sku": "h100-sxm-8x",
            "quantity": "16.000000",
            "unit": "gpu_hour",
            "amount": "37.60",
            "currency": "USD",
            "unit_price": "2.350000",
            "price_version": 1,
        },
    ]
    assert body["next_page_token"] is None and body["as_of"].endswith("Z")
    # the metered allocation is listed, but no energy counters were reported: nothing measured or
    # estimated, and the row says so rather than showing an invented figure
    assert all(
        row["it_kwh"] == "0.000" and row["source"] == "none" and row["coverage_pct"] in ("0.0", None)
        for row in body["energy"]
    )
    bad = acme_api.get("/api/v1/usage/", {"start": "yesterday"})
    assert bad.status_code == 400 and bad.json()["errors"][0]["field"] == "start"
    assert (
        acme_api.get("/api/v1/usage", {"start": "2026-10-01T00:00:00Z", "end": "2026-09-01T00:00:00Z"}).status_code
        == 400
    )


def test_invoices_list_detail_csv(acme_api, tenants, ingest):
    _bill(ingest, tenants[0])
    listing = acme_api.get("/api/v1/invoices").json()
    assert listing["next_page_token"] is None
    [invoice] = listing["results"]
    assert invoice["status"] == "draft" and invoice["period"] == "2026-09" and invoice["total"] == "0.94"
    assert invoice["lines"][0]["kind"] == "usage" and invoice["lines"][0]["amount"] == "0.94"
    detail = acme_api.get(f"/api/v1/invoices/{invoice['id']}/")
    assert detail.status_code == 200 and detail.json() == invoice
    csv = acme_api.get(f"/api/v1/invoices/{invoice['id']}.csv")
    assert csv.status_code == 200 and csv["Content-Type"].startswith("text/csv")
    rows = csv.content.decode().strip().splitlines()
    assert rows[0].startswith("invoice,status,period") and rows[-1].endswith(",0.94,USD,,,no")


def test_another_tenants_invoice_is_404(acme_api, globex_api, tenants, ingest):
    _bill(ingest, tenants[0])
    invoice = Invoice.objects.get(tenant_id=tenants[0].pk)
    for path in (f"/api/v1/invoices/{invoice.pk}", f"/api/v1/invoices/{invoice.pk}.csv"):
        response = globex_api.get(path)
        assert response.status_code == 404 and response.json()["code"] == "not_found"
    assert globex_api.get("/api/v1/invoices").json()["results"] == []
    assert globex_api.get("/api/v1/invoices/not-a-uuid").status_code == 404
    assert acme_api.get(f"/api/v1/invoices/{uuid.uuid4()}").status_code == 404


def test_page_token_of_another_tenant_is_rejected(acme_api, globex_api, tenants, ingest):
    for month in (7, 8, 9):
        _bill(ingest, tenants[0], period=SEPT.replace(month=month))
    first = acme_api.get("/api/v1/invoices", {"page_size": 2}).json()
    assert len(first["results"]) == 2 and first["next_page_token"]
    second = acme_api.get("/api/v1/invoices", {"page_size": 2, "page_token": first["next_page_token"]}).json()
    assert len(second["results"]) == 1 and second["next_page_token"] is None
    stolen = globex_api.get("/api/v1/invoices", {"page_size": 2, "page_token": first["next_page_token"]})
    assert stolen.status_code == 400 and stolen.json()["code"] == "invalid_page_token"


@pytest.mark.parametrize("path", ["/api/v1/invoices", "/api/v1/usage"])
def test_query_counts_are_fixed(acme_api, tenants, ingest, path):
    def counts():
        with CaptureQueriesContext(connections["default"]) as d, CaptureQueriesContext(connections["ledger"]) as l:
            assert acme_api.get(path).status_code == 200
        return len(d), len(l)

    _bill(ingest, tenants[0], period=SEPT.replace(month=8))
    counts()  # the token's first use records last_used_at (once a minute): not part of the list
    small = counts()
    for month in (9, 10, 11):
        _bill(ingest, tenants[0], n=20, period=SEPT.replace(month=month))
    assert counts() == small


def test_agent_and_ops_tokens_cannot_read_invoices(ops_api, agent_api):
    assert ops_api.get("/api/v1/invoices").status_code == 403
    assert agent_api.get("/api/v1/invoices").status_code == 403


def test_ops_billing_runs(ops_api, acme_api, tenants, ingest):
    ingest([make_event(tenant_id=tenants[0].pk, start=SEPT + timedelta(days=2))])
    url = "/api/v1/ops/billing-runs"
    assert ops_api.post(url, {"period": "2026-09"}, format="json").json()["code"] == "idempotency_key_missing"
    first = ops_api.post(url, {"period": "2026-09", "finalize": True}, format="json", HTTP_IDEMPOTENCY_KEY="k1")
    assert first.status_code == 201, first.content
    assert first.json()["invoices"] == 1 and first.json()["finalize"] is True
    replay = ops_api.post(url, {"period": "2026-09", "finalize": True}, format="json", HTTP_IDEMPOTENCY_KEY="k1")
    assert replay.json() == first.json() and replay["Idempotent-Replayed"] == "true"
    again = ops_api.post(url, {"period": "2026-09", "finalize": True}, format="json", HTTP_IDEMPOTENCY_KEY="k2")
    assert again.status_code == 200 and again.json()["id"] == first.json()["id"]
    assert acme_api.get("/api/v1/invoices").json()["results"][0]["number"] == "HANGAR-000001"
    bad = ops_api.post(url, {"period": "Sept"}, format="json", HTTP_IDEMPOTENCY_KEY="k3")
    assert bad.status_code == 400 and bad.json()["errors"][0]["field"] == "period"
    future = ops_api.post(url, {"period": "2999-01", "finalize": True}, format="json", HTTP_IDEMPOTENCY_KEY="k4")
    assert future.status_code == 409 and future.json()["code"] == "period_open"
    assert acme_api.post(url, {"period": "2026-09"}, format="json", HTTP_IDEMPOTENCY_KEY="k5").status_code == 403


def test_the_invoice_csv_says_its_total_excludes_tax(acme_api, tenants, ingest):
    """Issue 40, finding 10: the CSV's total was the net before tax while the PDF's "Total due"
    includes it, and nothing in the CSV said which."""
    import csv as csv_module
    import io

    tenants[0].tax_rate_percent = Decimal("19.00")
    tenants[0].save()
    _bill(ingest, tenants[0])
    invoice = acme_api.get("/api/v1/invoices").json()["results"][0]
    body = acme_api.get(f"/api/v1/invoices/{invoice['id']}.csv").content.decode()
    rows = list(csv_module.DictReader(io.StringIO(body)))
    assert "tax_included" in body.splitlines()[0].split(",")
    assert {row["tax_included"] for row in rows} == {"no"}
    total = rows[-1]
    assert total["kind"] == "total" and total["description"].startswith("Total excluding tax")
    # the same figure as the API's total_excluding_tax, not its total_including_tax
    assert total["amount"] == invoice["total_excluding_tax"] == "0.94"
    assert invoice["total_including_tax"] == "1.12"  # 0.94 + 19 % (0.1786 → 0.18)
