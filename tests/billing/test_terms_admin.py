"""Operators add price-book versions and SLA policies in the admin: effective in the future only,
with the permission, audited, and (prices) after a preview of what the change does to open drafts."""

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from billing.models import Invoice, PriceBookEntry, SlaPolicy
from billing.services.runs import run_billing

from .conftest import LEDGER_DBS, make_event

pytestmark = pytest.mark.django_db(databases=LEDGER_DBS)


def _next_month() -> date:
    today = timezone.now().date()
    return date(today.year + today.month // 12, today.month % 12 + 1, 1)


def _form(effective_from: datetime, price: str = "3.00", **extra) -> dict:
    return {
        "version": "2",
        "sku": "h100-sxm-8x",
        "unit": "gpu_hour",
        "unit_price": price,
        "currency": "USD",
        "effective_from_0": effective_from.strftime("%Y-%m-%d"),
        "effective_from_1": effective_from.strftime("%H:%M:%S"),
        "source": "list price change, board minutes 2026-11",
        **extra,
    }


def test_an_operator_adds_next_months_price_after_a_preview_and_the_draft_reflects_it(ingest, tenants, operator_client):
    """10 GPU-h next month: 23.50 at v1's 2.35; the admin previews 23.50 → 30.00 for v2 at 3.00,
    and once confirmed the draft says 30.00."""
    from core.models import AuditEvent

    month = _next_month()
    first = datetime(month.year, month.month, 1, tzinfo=UTC)
    ingest([make_event(tenant_id=tenants[0].pk, start=first + timedelta(days=1), seconds=4500)])  # 10 GPU-h
    run_billing(period=month, finalize=False, actor="test", now=first + timedelta(days=2))
    assert Invoice.objects.get(period=month).total == Decimal("23.50")
    url = "/admin/billing/pricebookentry/add/"
    preview = operator_client.post(url, _form(first))
    assert preview.status_code == 200 and not PriceBookEntry.objects.filter(version=2).exists()
    assert f"{month:%Y-%m} {tenants[0].pk}: 23.50 → 30.00" in preview.content.decode()
    saved = operator_client.post(url, _form(first, confirm="on"))
    assert saved.status_code == 302
    assert AuditEvent.objects.filter(action="pricebookentry.admin_create").count() == 1
    run_billing(period=month, finalize=False, actor="test", now=first + timedelta(days=2))
    assert Invoice.objects.get(period=month).total == Decimal("30.00")


def test_a_past_price_is_refused_and_the_permission_is_needed(operator_client, client, django_user_model):
    url = "/admin/billing/pricebookentry/add/"
    past = operator_client.post(url, _form(timezone.now() - timedelta(days=1), confirm="on"))
    assert past.status_code == 200 and b"takes effect in the future" in past.content
    assert not PriceBookEntry.objects.filter(version=2).exists()
    staff = django_user_model.objects.create_user("staff-no-perm", password="pw-123456789", is_staff=True)
    client.force_login(staff)
    assert client.post(url, _form(timezone.now() + timedelta(days=40), confirm="on")).status_code == 403
    assert not PriceBookEntry.objects.filter(version=2).exists()


def test_an_sla_policy_version_is_added_for_the_future_only(operator_client):
    url = "/admin/billing/slapolicy/add/"
    when = timezone.now() + timedelta(days=3)
    form = {
        "key": "standard",
        "version": "2",
        "name": "Standard SLA",
        "attributions": "provider",
        "credit_rate": "0.5",
        "cap_percent": "50",
        "effective_from_0": when.strftime("%Y-%m-%d"),
        "effective_from_1": when.strftime("%H:%M:%S"),
        "source": "contract v2",
        "tenant_id": "",
    }
    assert operator_client.post(url, {**form, "version": "5"}).status_code == 200  # not the next version
    assert operator_client.post(url, form).status_code == 302
    assert SlaPolicy.objects.get(key="standard", version=2).cap_percent == Decimal("50")
