"""The second audit's findings (issue: invoices that prove themselves), each with the figure a
hand calculation gives. H100 is 2.35 /GPU-h in price book v1.

The `overrun` history (tests/billing/test_disputes.py): acme's allocation held the node from
10 Oct 00:00 for two hours; the agent metered four one-hour events of 8 GPUs (18.80 each).
October bills the first two (37.60); the last two are held as disputed."""

import uuid
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest

from billing.models import Adjustment, Invoice, PriceBookEntry, SlaPolicy, UsageDispute
from billing.services.corrections import reissue_invoice
from billing.services.credits import record_sla_credit
from billing.services.disputes import transition
from billing.services.runs import run_billing

from .conftest import LEDGER_DBS
from .conftest import OVERRUN_START as START
from .test_disputes import _resolver

pytestmark = pytest.mark.django_db(databases=LEDGER_DBS)
OCT, NOV = date(2026, 10, 1), date(2026, 11, 1)
NOW = datetime(2026, 12, 5, tzinfo=UTC)


def _live(tenant, period) -> Invoice:
    return Invoice.objects.exclude(status="void").get(tenant_id=tenant.pk, period=period)


def _accept(dispute, user):
    return transition(dispute_id=dispute.public_id, to_status="accepted", user=user, actor="user:op", note="ok")


def test_reissue_after_a_dispute_was_accepted_bills_the_disputed_usage_once(overrun, django_user_model, operator_user):
    """October 37.60 with 2 × 18.80 held. One held hour is accepted after October closed and goes
    onto November as late usage (18.80). Re-issuing October must still say 37.60 (not 56.40):
    October + November = 56.40, each GPU-hour once."""
    tenant = overrun["tenant"]
    run_billing(period=OCT, finalize=True, actor="test", now=NOW)
    assert _live(tenant, OCT).total == Decimal("37.60")
    first, _second = UsageDispute.objects.order_by("usage_event__start")
    _accept(first, _resolver(django_user_model))
    run_billing(period=NOV, finalize=True, actor="test", now=NOW)
    assert _live(tenant, NOV).total == Decimal("18.80")
    again = reissue_invoice(by=operator_user, invoice_id=_live(tenant, OCT).pk, reason="typo in address")
    assert again.total == Decimal("37.60")
    assert again.total + _live(tenant, NOV).total == Decimal("56.40")
    # re-issuing twice is the same as once
    third = reissue_invoice(by=operator_user, invoice_id=again.pk, reason="again")
    assert [(x.kind, x.quantity_micro, x.amount) for x in third.lines.all()] == [
        (x.kind, x.quantity_micro, x.amount) for x in again.lines.all()
    ]


def test_an_accepted_late_dispute_is_priced_at_its_own_intervals_version(overrun, django_user_model):
    """v2 (3.00) takes effect on 20 Oct, after the held hour ran (10 Oct, v1 2.35): accepted after
    October closed, the hour is 8 GPU-h × 2.35 = 18.80 on November, not 8 × 3.00 = 24.00, and the
    line shows its unit price and version."""
    PriceBookEntry.objects.create(
        version=2,
        sku="h100-sxm-8x",
        unit_price=Decimal("3.00"),
        effective_from=datetime(2026, 10, 20, tzinfo=UTC),
        source="test",
    )
    run_billing(period=OCT, finalize=True, actor="test", now=NOW)
    first, _ = UsageDispute.objects.order_by("usage_event__start")
    _accept(first, _resolver(django_user_model))
    run_billing(period=NOV, finalize=False, actor="test", now=NOW)
    [line] = _live(overrun["tenant"], NOV).lines.all()
    assert (line.kind, line.usage_period, line.amount) == ("late_usage", OCT, Decimal("18.80"))
    assert (line.unit_price, line.price_version, line.gpu_seconds) == (Decimal("2.35"), 1, Decimal("28800"))


def test_the_sla_cap_counts_only_charged_usage_not_held(overrun, small_fleet):
    """A 50 % cap on the allocation's October charge: 37.60 charged (the held 37.60 is charged to
    nobody), so a 2-hour 8-GPU outage (37.60 uncapped) is credited 18.80, not 37.60."""
    tenant, node = overrun["tenant"], overrun["node"]
    allocation = uuid.UUID(overrun["events"][0]["allocation_id"])
    SlaPolicy.objects.create(
        key="half",
        version=1,
        tenant_id=tenant.pk,
        name="Half cap",
        attributions="provider",
        credit_rate=Decimal("1"),
        cap_percent=Decimal("50"),
        effective_from=datetime(2026, 1, 1, tzinfo=UTC),
        source="test contract",
    )
    record_sla_credit(
        tenant_id=tenant.pk,
        allocation_id=allocation,
        node_id=node.pk,
        start=START,
        end=START + timedelta(hours=2),
        gpus=8,
        reason="pulled",
        incident_id="inc-cap",
    )
    run_billing(period=OCT, finalize=True, actor="test", now=NOW)
    october = _live(tenant, OCT)
    assert october.lines.get(kind="sla_credit").amount == Decimal("-18.80")
    assert october.total == Decimal("18.80")


def test_a_credit_window_stops_when_the_allocation_ended(tenants, small_fleet):
    """The allocation ended at 12:00; a window from 10:00 to the repair a month later credits two
    hours (8 GPUs × 2 h × 2.35 = 37.60), and nothing in the months after."""
    from fleet.models import Node
    from tenants.models import Allocation, AllocationNode

    node = Node.objects.order_by("hostname").first()
    joined, ended = datetime(2026, 9, 1, tzinfo=UTC), datetime(2026, 9, 10, 12, tzinfo=UTC)
    allocation = Allocation.objects.create(
        tenant=tenants[0], name="x", instance_type=node.node_type, node_count=1, state="released", ended_at=ended
    )
    AllocationNode.objects.create(allocation=allocation, node=node, started_at=joined, ended_at=ended)
    credits = record_sla_credit(
        tenant_id=tenants[0].pk,
        allocation_id=allocation.pk,
        node_id=node.pk,
        start=datetime(2026, 9, 10, 10, tzinfo=UTC),
        end=datetime(2026, 11, 2, tzinfo=UTC),
        gpus=8,
        reason="pulled",
        incident_id="inc-window",
    )
    assert [(c.period, c.end - c.start, c.amount) for c in credits] == [
        (date(2026, 9, 1), timedelta(hours=2), Decimal("-37.600000"))
    ]


def test_a_tenant_attributed_postmortem_closes_with_no_credit(small_fleet):
    """update_postmortem(attribution="tenant", close=True) on a provider-opened incident: the
    attribution is saved before credits settle, so 0.00 is credited (not −188.00 for 8 GPUs × 10 h)."""
    from fleet.choices import Lifecycle
    from fleet.models import Node
    from health.models import Incident, IncidentImpact
    from health.services.incidents import update_postmortem
    from tenants.models import Allocation, AllocationNode, Tenant

    pulled = Node.objects.select_related("node_type").order_by("hostname").first()
    at = datetime(2026, 9, 10, 2, tzinfo=UTC)
    tenant = Tenant.objects.create(slug="acme", name="Acme")
    allocation = Allocation.objects.create(
        tenant=tenant, name="t", instance_type=pulled.node_type, node_count=1, state="active"
    )
    AllocationNode.objects.create(allocation=allocation, node=pulled, started_at=at - timedelta(days=1), ended_at=at)
    incident = Incident.objects.create(
        title="xid 79", opened_by="policy", severity="fatal", opened_at=at, attribution="provider"
    )
    incident.nodes.set([pulled])
    IncidentImpact.objects.create(
        incident=incident, node=pulled, allocation=allocation, tenant=tenant, gpus=8, start=at
    )
    Node.objects.filter(pk=pulled.pk).update(lifecycle=Lifecycle.RMA)
    update_postmortem(
        incident=incident, actor="user:op", cause="tenant's kernel module", attribution="tenant", close=True
    )
    incident.refresh_from_db()
    assert (incident.attribution, incident.state) == ("tenant", "closed")
    assert not Adjustment.objects.filter(kind="sla_credit").exists()
    assert IncidentImpact.objects.get().credited


def test_the_services_ask_the_apis_permission_whoever_calls_them(ingest, django_user_model, tenants):
    """A staff account without billing.add_adjustment / billing.add_creditnote is refused by the
    services themselves, not only by the API; the billing-admins group may."""
    from django.contrib.auth.models import Group

    from billing.services.corrections import CreditRequest, issue_credit_note
    from billing.services.credits import NotPermitted, record_manual_adjustment

    from .conftest import make_event

    staff = django_user_model.objects.create_user("staff-only", password="pw-123456789", is_staff=True)
    with pytest.raises(NotPermitted, match="billing.add_adjustment"):
        record_manual_adjustment(by=staff, tenant_id=tenants[0].pk, period=OCT, amount="-5.00", reason="goodwill")
    ingest([make_event(tenant_id=tenants[0].pk, start=datetime(2026, 10, 3, tzinfo=UTC), seconds=3600)])
    run_billing(period=OCT, finalize=True, actor="test", now=NOW)
    invoice = _live(tenants[0], OCT)
    with pytest.raises(NotPermitted, match="billing.add_creditnote"):
        issue_credit_note(by=staff, invoice_id=invoice.pk, requests=[CreditRequest(1, Decimal("1.00"))], reason="x")
    with pytest.raises(NotPermitted, match="billing.change_invoice"):
        reissue_invoice(by=staff, invoice_id=invoice.pk, reason="x")
    admin = django_user_model.objects.create_user("billing-admin", password="pw-123456789", is_staff=True)
    admin.groups.add(Group.objects.get(name="billing-admins"))
    admin = django_user_model.objects.get(pk=admin.pk)  # a fresh permission cache
    note = issue_credit_note(by=admin, invoice_id=invoice.pk, requests=[CreditRequest(1, Decimal("1.00"))], reason="x")
    assert note.total == Decimal("1.00")


def test_an_adjustment_for_a_month_without_usage_is_invoiced_and_an_unknown_tenant_refused(
    tenants, operator_user, ops_api
):
    """A 12.34 charge for August, a month with no usage, is on August's invoice once the month
    closes; an adjustment for a tenant nobody knows is a 400, and records nothing."""
    from billing.services.credits import record_manual_adjustment
    from billing.services.runs import finalize_due

    record_manual_adjustment(
        by=operator_user, tenant_id=tenants[0].pk, period=date(2026, 8, 1), amount="12.34", reason="setup fee"
    )
    finalize_due(now=NOW, actor="test")
    assert _live(tenants[0], date(2026, 8, 1)).total == Decimal("12.34")
    refused = ops_api.post(
        "/api/v1/ops/billing-adjustments",
        {"tenant_id": str(uuid.uuid4()), "period": "2026-08", "amount": "5.00", "reason": "typo"},
        format="json",
        HTTP_IDEMPOTENCY_KEY=str(uuid.uuid4()),
    )
    assert refused.status_code == 400 and "no tenant" in refused.json()["detail"]
    assert Adjustment.objects.count() == 1


@pytest.fixture
def taxed_invoice(ingest, tenants):
    """acme at 19 % tax: 8 GPU-h (18.80) and a −5.00 goodwill adjustment in October: net 13.80,
    tax 2.62 (13.80 × 0.19 = 2.622), total due 16.42."""
    from django.contrib.auth import get_user_model

    from billing.services.credits import record_manual_adjustment

    from .conftest import make_event

    acme = tenants[0]
    acme.tax_rate_percent = Decimal("19")
    acme.save()
    op = get_user_model().objects.create_user("cn-op", password="pw-123456789", is_staff=True, is_superuser=True)
    ingest([make_event(tenant_id=acme.pk, start=datetime(2026, 10, 3, tzinfo=UTC), seconds=3600)])
    record_manual_adjustment(by=op, tenant_id=acme.pk, period=OCT, amount="-5.00", reason="goodwill")
    run_billing(period=OCT, finalize=True, actor="test", now=NOW)
    invoice = _live(acme, OCT)
    assert (invoice.total, invoice.tax_rate_percent) == (Decimal("13.80"), Decimal("19.00"))
    return invoice, op


def test_credit_notes_are_bounded_by_the_net_carry_tax_and_leave_a_balance(taxed_invoice, acme_api, client, tenants):
    from billing.services.corrections import CorrectionError, CreditRequest, issue_credit_note

    invoice, op = taxed_invoice
    # crediting the whole 18.80 charge line would leave the invoice at −5.00: refused
    with pytest.raises(CorrectionError) as refused:
        issue_credit_note(by=op, invoice_id=invoice.pk, requests=[CreditRequest(1, Decimal("18.80"))], reason="x")
    assert "at most 13.80 in all" in str(refused.value.errors)
    first = issue_credit_note(by=op, invoice_id=invoice.pk, requests=[CreditRequest(1, Decimal("10.00"))], reason="a")
    assert (first.number, first.total, first.tax) == ("HANGAR-CN-000001", Decimal("10.00"), Decimal("1.90"))
    rest = issue_credit_note(by=op, invoice_id=invoice.pk, requests=[CreditRequest(1, Decimal("3.80"))], reason="b")
    # 3.80 × 0.19 = 0.722 → 0.72; the last note gives back the 0.72 of tax left (2.62 − 1.90)
    assert (rest.total, rest.tax) == (Decimal("3.80"), Decimal("0.72"))
    body = acme_api.get(f"/api/v1/invoices/{invoice.pk}").json()
    assert (body["total"], body["total_excluding_tax"], body["tax"], body["total_including_tax"]) == (
        "13.80",
        "13.80",
        "2.62",
        "16.42",
    )
    assert (body["credited"], body["balance_due"]) == ("16.42", "0.00")
    assert [n["total_including_tax"] for n in body["credit_notes"]] == ["11.90", "4.52"]
    from tenants.models import Membership

    user = django_user_model_create("acme-member")
    Membership.objects.create(tenant=tenants[0], user=user, role="viewer")
    client.force_login(user)
    page = client.get(f"/portal/invoices/{invoice.pk}/")
    assert b"HANGAR-CN-000001" in page.content and b'id="invoice-balance">0.00 USD' in page.content
    pdf = client.get(f"/portal/credit-notes/{first.pk}.pdf")
    from fleet.pdf import pdf_unavailable_reason

    if pdf_unavailable_reason() is None:
        assert pdf.status_code == 200 and pdf["Content-Type"] == "application/pdf"
    else:  # without Pango the link answers a problem that says how to enable PDFs
        assert pdf.status_code == 503 and pdf.json()["code"] == "pdf_unavailable"
    other = django_user_model_create("globex-member")
    Membership.objects.create(tenant=tenants[1], user=other, role="viewer")
    client.force_login(other)
    assert client.get(f"/portal/credit-notes/{first.pk}.pdf").status_code == 404  # another tenant's


def django_user_model_create(name):
    from django.contrib.auth import get_user_model

    return get_user_model().objects.create_user(name, password="pw-123456789")


def test_documents_name_the_seller_the_month_and_the_stored_price(
    ingest, tenants, operator_user, operator_client, client, settings
):
    """Seller identity from settings on the page; a late adjustment names its month; a unit price
    of 1.999999 shows as 1.999999 (not 2.0000); the console's totals net out credit notes."""
    from billing.services.corrections import CreditRequest, issue_credit_note
    from billing.services.credits import record_manual_adjustment
    from tenants.models import Membership

    from .conftest import make_event

    settings.BILLING_SELLER_NAME, settings.BILLING_SELLER_TAX_ID = "Hangar Compute GmbH", "DE123456789"
    settings.BILLING_SELLER_ADDRESS = "Musterstr. 1|10115 Berlin"
    acme = tenants[0]
    PriceBookEntry.objects.create(
        version=2,
        sku="a100-sxm-8x",
        unit_price=Decimal("1.999999"),
        effective_from=datetime(2026, 1, 1, tzinfo=UTC),
        source="t",
    )
    ingest([make_event(tenant_id=acme.pk, start=datetime(2026, 10, 3, tzinfo=UTC), seconds=3600, sku="a100-sxm-8x")])
    run_billing(period=OCT, finalize=True, actor="test", now=NOW)
    record_manual_adjustment(by=operator_user, tenant_id=acme.pk, period=OCT, amount="3.00", reason="rack fee")
    run_billing(period=NOV, finalize=True, actor="test", now=NOW)
    [late] = _live(acme, NOV).lines.all()
    assert late.description == "rack fee (for 2026-10)" and late.usage_period == OCT
    october = _live(acme, OCT)
    issue_credit_note(by=operator_user, invoice_id=october.pk, requests=[CreditRequest(1, Decimal("2.00"))], reason="x")
    overview = operator_client.get("/billing/").content.decode()  # (the same client, as the operator first)
    # October 8 GPU-h × 1.999999 = 15.999992 → 16.00, November 3.00: 19.00; less the 2.00 note: 17.00
    table = overview[overview.find("Invoices by tenant") :][:2000]
    assert "19.00 USD" in table and "−2.00 USD" in table and "17.00 USD" in table, table
    member = django_user_model_create("acme-docs")
    Membership.objects.create(tenant=acme, user=member, role="viewer")
    client.force_login(member)
    page = client.get(f"/portal/invoices/{october.pk}/").content.decode()
    assert "Hangar Compute GmbH" in page and "10115 Berlin" in page and "DE123456789" in page
    assert "1.999999 USD / GPU-h" in page and "2.0000" not in page
