"""Corrections are documents: void → re-issue, credit notes, manual adjustments (operators only)."""

import uuid
from datetime import UTC, date, datetime
from decimal import Decimal

import pytest

from billing.models import CreditNote, Invoice
from billing.services.runs import run_billing
from core.models import AuditEvent

from .conftest import LEDGER_DBS, make_event

pytestmark = pytest.mark.django_db(databases=LEDGER_DBS)
SEP, OCT = date(2026, 9, 1), date(2026, 10, 1)
NOW = datetime(2026, 12, 1, tzinfo=UTC)


def _finalized_september(ingest, tenant_id) -> Invoice:
    # 8 GPU-h H100 (18.80) and 4 GPU-h A100 (6.00)
    ingest(
        [
            make_event(tenant_id=tenant_id, start=datetime(2026, 9, 3, tzinfo=UTC), seconds=3600),
            make_event(tenant_id=tenant_id, start=datetime(2026, 9, 4, tzinfo=UTC), seconds=1800, sku="a100-sxm-8x"),
        ]
    )
    run_billing(period=SEP, finalize=True, actor="test", now=NOW)
    return Invoice.objects.get(tenant_id=tenant_id, period=SEP)


def _post(client, path, body, key=None):
    return client.post(path, body, format="json", HTTP_IDEMPOTENCY_KEY=key or str(uuid.uuid4()))


def test_a_voided_invoice_is_reissued_with_its_usage_under_a_new_number(ingest, ops_api, tenants, acme_api):
    acme = tenants[0]
    old = _finalized_september(ingest, acme.pk)
    assert (old.number, old.total) == ("HANGAR-000001", Decimal("24.80"))
    response = _post(ops_api, f"/api/v1/ops/invoices/{old.pk}/reissue", {"reason": "bill-to address was wrong"})
    assert response.status_code == 201, response.json()
    new = response.json()
    assert new["number"] == "HANGAR-000002" and new["replaces"] == "HANGAR-000001" and new["status"] == "finalized"
    assert new["total"] == "24.80"
    old.refresh_from_db()
    assert old.status == "void" and old.void_reason == "bill-to address was wrong"
    old_lines = [(line.kind, line.sku, line.quantity_micro, line.unit_price, line.amount) for line in old.lines.all()]
    new_lines = [
        (line.kind, line.sku, line.quantity_micro, line.unit_price, line.amount)
        for line in Invoice.objects.get(number="HANGAR-000002").lines.all()
    ]
    assert new_lines == old_lines
    # Usage billed once: the next month does not pick September up again.
    ingest([make_event(tenant_id=acme.pk, start=datetime(2026, 10, 3, tzinfo=UTC))])
    run_billing(period=OCT, finalize=True, actor="test", now=NOW)
    assert [line.kind for line in Invoice.objects.get(tenant_id=acme.pk, period=OCT).lines.all()] == ["usage"]
    # Voiding the void one again is refused; the tenant sees both documents.
    again = _post(ops_api, f"/api/v1/ops/invoices/{old.pk}/reissue", {"reason": "again"})
    assert again.status_code == 409 and again.json()["code"] == "invoice_not_finalized"
    statuses = sorted(i["status"] for i in acme_api.get("/api/v1/invoices").json()["results"])
    assert statuses == ["finalized", "finalized", "void"]
    assert AuditEvent.objects.filter(action="billing.invoice_reissue").count() == 1


def test_credit_notes_are_numbered_and_capped_at_what_the_line_billed(ingest, ops_api, tenants, acme_api):
    invoice = _finalized_september(ingest, tenants[0].pk)
    path = f"/api/v1/ops/invoices/{invoice.pk}/credit-notes"
    assert [(line.position, line.amount) for line in invoice.lines.all()] == [
        (1, Decimal("6.00")),
        (2, Decimal("18.80")),
    ]
    first = _post(ops_api, path, {"reason": "goodwill", "lines": [{"position": 2, "amount": "10.00"}]})
    assert first.status_code == 201, first.json()
    assert first.json()["number"] == "HANGAR-CN-000001" and first.json()["invoice"] == "HANGAR-000001"
    too_much = _post(ops_api, path, {"reason": "more", "lines": [{"position": 2, "amount": "8.81"}]})
    assert too_much.status_code == 400 and too_much.json()["code"] == "credit_exceeds_line"
    assert "8.80" in too_much.json()["errors"][0]["message"]
    rest = _post(
        ops_api,
        path,
        {"reason": "rest", "lines": [{"position": 2, "amount": "8.80"}, {"position": 1, "amount": "6.00"}]},
    )
    assert rest.status_code == 201 and rest.json()["number"] == "HANGAR-CN-000002" and rest.json()["total"] == "14.80"
    for bad in (
        {"reason": "x", "lines": [{"position": 9, "amount": "1.00"}]},
        {"reason": "x", "lines": [{"position": 1, "amount": "-1.00"}]},
        {"reason": "x", "lines": [{"position": 1, "amount": "1e400"}]},
        {"reason": "x", "lines": [{"position": 1, "amount": "0.01"}]},  # nothing left to credit
        {"reason": "", "lines": [{"position": 1, "amount": "1.00"}]},
        {"reason": "x", "lines": []},
    ):
        assert _post(ops_api, path, bad).status_code == 400
    # Re-issuing an invoice with credit notes is refused: correct it with another credit note.
    refused = _post(ops_api, f"/api/v1/ops/invoices/{invoice.pk}/reissue", {"reason": "x"})
    assert refused.status_code == 409 and refused.json()["code"] == "invoice_has_credit_notes"
    shown = acme_api.get(f"/api/v1/invoices/{invoice.pk}").json()
    assert [n["number"] for n in shown["credit_notes"]] == ["HANGAR-CN-000001", "HANGAR-CN-000002"]
    assert shown["credit_notes"][1]["lines"][1] == {
        "position": 2,
        "invoice_line": 1,
        "amount": "6.00",
        "description": shown["credit_notes"][1]["lines"][1]["description"],
    }


def test_a_draft_cannot_get_a_credit_note(ingest, ops_api, tenants):
    ingest([make_event(tenant_id=tenants[0].pk, start=datetime(2026, 9, 3, tzinfo=UTC))])
    run_billing(period=SEP, finalize=False, actor="test")
    draft = Invoice.objects.get()
    response = _post(
        ops_api,
        f"/api/v1/ops/invoices/{draft.pk}/credit-notes",
        {"reason": "x", "lines": [{"position": 1, "amount": "0.01"}]},
    )
    assert response.status_code == 409 and response.json()["code"] == "invoice_not_finalized"


def test_manual_adjustment_lands_on_the_invoice_with_its_reason(ingest, ops_api, tenants):
    acme = tenants[0]
    ingest([make_event(tenant_id=acme.pk, start=datetime(2026, 9, 3, tzinfo=UTC), seconds=3600)])
    response = _post(
        ops_api,
        "/api/v1/ops/billing-adjustments",
        {"tenant_id": str(acme.pk), "period": "2026-09", "amount": "-5.00", "reason": "ticket 4711: slow storage"},
    )
    assert response.status_code == 201, response.json()
    run_billing(period=SEP, finalize=True, actor="test", now=NOW)
    invoice = Invoice.objects.get(tenant_id=acme.pk)
    manual = invoice.lines.get(kind="manual")
    assert manual.amount == Decimal("-5.00") and manual.description == "ticket 4711: slow storage"
    assert "recorded by" in manual.note and invoice.total == Decimal("13.80")
    assert AuditEvent.objects.filter(action="billing.manual_adjustment").count() == 1
    for bad in (
        {"tenant_id": str(acme.pk), "period": "2026-09", "amount": "-5.00", "reason": ""},
        {"tenant_id": str(acme.pk), "period": "2026-13", "amount": "-5.00", "reason": "x"},
        {"tenant_id": str(acme.pk), "period": "2026-09", "amount": "1e12", "reason": "x"},
        {"tenant_id": str(acme.pk), "period": "2026-09", "amount": "0.001", "reason": "x"},
        {"tenant_id": "nope", "period": "2026-09", "amount": "1.00", "reason": "x"},
    ):
        assert _post(ops_api, "/api/v1/ops/billing-adjustments", bad).status_code == 400, bad


def test_tenants_cannot_correct_invoices(ingest, acme_api, tenants):
    """The attacker's requests: a tenant token on every correction route is 403 and changes nothing."""
    from rest_framework.test import APIClient

    from core.services.tokens import create_api_token

    invoice = _finalized_september(ingest, tenants[0].pk)
    _, plain = create_api_token(kind="tenant", tenant=tenants[0], role="admin", actor="test")
    admin = APIClient()
    admin.credentials(HTTP_AUTHORIZATION=f"Bearer {plain}")
    for client in (acme_api, admin):
        assert _post(client, f"/api/v1/ops/invoices/{invoice.pk}/reissue", {"reason": "x"}).status_code == 403
        assert (
            _post(
                client,
                f"/api/v1/ops/invoices/{invoice.pk}/credit-notes",
                {"reason": "x", "lines": [{"position": 1, "amount": "18.80"}]},
            ).status_code
            == 403
        )
        assert (
            _post(
                client,
                "/api/v1/ops/billing-adjustments",
                {"tenant_id": str(tenants[0].pk), "period": "2026-09", "amount": "-18.80", "reason": "x"},
            ).status_code
            == 403
        )
    invoice.refresh_from_db()
    assert invoice.status == "finalized" and not CreditNote.objects.exists()


def test_another_tenants_credit_notes_stay_hidden(ingest, ops_api, globex_api, tenants):
    invoice = _finalized_september(ingest, tenants[0].pk)
    _post(
        ops_api,
        f"/api/v1/ops/invoices/{invoice.pk}/credit-notes",
        {"reason": "x", "lines": [{"position": 1, "amount": "1.00"}]},
    )
    assert globex_api.get(f"/api/v1/invoices/{invoice.pk}").status_code == 404
    assert globex_api.get("/api/v1/invoices").json()["results"] == []


def test_unknown_invoice_is_404(ops_api):
    missing = uuid.uuid4()
    assert _post(ops_api, f"/api/v1/ops/invoices/{missing}/reissue", {"reason": "x"}).status_code == 404
    assert (
        _post(
            ops_api,
            "/api/v1/ops/invoices/not-a-uuid/credit-notes",
            {"reason": "x", "lines": [{"position": 1, "amount": "1.00"}]},
        ).status_code
        == 404
    )
