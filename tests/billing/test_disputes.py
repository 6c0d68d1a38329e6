"""Disputed usage: events whose grant verified but which the allocation history contradicts are
held out of every invoice until an operator accepts (billed, late if need be) or rejects them."""

import uuid
from datetime import UTC, date, datetime, timedelta

import pytest
from django.contrib.auth.models import Permission
from django.db import connections
from django.test.utils import CaptureQueriesContext

from billing.grants import MeteringGrant, sign_grant
from billing.models import Invoice, LineKind, UsageDispute
from billing.services.ingest import ingest_meter_events
from billing.services.runs import run_billing

from .conftest import LEDGER_DBS, make_event

pytestmark = pytest.mark.django_db(databases=LEDGER_DBS)
OCT = date(2026, 10, 1)
NOV = date(2026, 11, 1)
START = datetime(2026, 10, 10, tzinfo=UTC)
AFTER_OCT = datetime(2026, 11, 2, tzinfo=UTC)


def _usage_lines(tenant, period):
    invoice = Invoice.objects.get(tenant_id=tenant.pk, period=period)
    return [(line.kind, str(line.quantity)) for line in invoice.lines.all()]


def _resolver(django_user_model, name="billing-admin"):
    user = django_user_model.objects.create_user(name, password="pw-123456789", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="resolve_usagedispute"))
    return user


def test_contradicted_usage_is_held_and_never_on_a_finalized_invoice(overrun):
    run_billing(period=OCT, finalize=True, actor="test", now=AFTER_OCT)
    assert _usage_lines(overrun["tenant"], OCT) == [(LineKind.USAGE, "16.000000")]  # 2 h × 8 GPUs, not 4 h
    held = list(UsageDispute.objects.order_by("usage_event__start"))
    assert [d.status for d in held] == ["open", "open"]
    assert "outside every membership" in held[0].reason
    run_billing(period=NOV, finalize=False, actor="test", now=AFTER_OCT)  # still held: on no invoice
    assert not Invoice.objects.filter(period=NOV).exists()


def test_accepting_after_finalization_bills_it_once_as_late_usage_and_rejecting_never(
    overrun, client, django_user_model
):
    from core.models import AuditEvent

    run_billing(period=OCT, finalize=True, actor="test", now=AFTER_OCT)
    accept, reject = UsageDispute.objects.order_by("usage_event__start")
    client.force_login(_resolver(django_user_model))
    page = client.get(f"/billing/disputes/{accept.public_id}/")
    assert page.status_code == 200 and b"Accept and bill" in page.content and b"acme" in page.content
    assert (
        client.post(
            f"/billing/disputes/{accept.public_id}/", {"decision": "accept", "note": "customer confirmed"}
        ).status_code
        == 302
    )
    assert (
        client.post(
            f"/billing/disputes/{reject.public_id}/", {"decision": "reject", "note": "after release"}
        ).status_code
        == 302
    )
    accept.refresh_from_db(), reject.refresh_from_db()
    assert (accept.status, reject.status) == ("accepted", "rejected")
    assert accept.resolved_by == "user:billing-admin" and accept.adjustment is not None
    assert AuditEvent.objects.filter(action="billing.dispute_accept", reason="customer confirmed").count() == 1
    assert AuditEvent.objects.filter(action="billing.dispute_reject").count() == 1
    # a decision is final
    again = client.post(
        f"/billing/disputes/{reject.public_id}/", {"decision": "accept", "note": "changed my mind"}, follow=True
    )
    assert b"already rejected" in again.content
    run_billing(period=NOV, finalize=False, actor="test", now=AFTER_OCT)
    # the accepted hour: 8 GPU-hours, on November's invoice as late usage; the rejected hour nowhere
    assert _usage_lines(overrun["tenant"], NOV) == [(LineKind.LATE_USAGE, "8.000000")]
    assert _usage_lines(overrun["tenant"], OCT) == [(LineKind.USAGE, "16.000000")]


def test_accepting_before_finalization_rates_it_in_its_own_month(overrun, django_user_model):
    from billing.services.disputes import transition

    run_billing(period=OCT, finalize=False, actor="test", now=AFTER_OCT)
    assert _usage_lines(overrun["tenant"], OCT) == [(LineKind.USAGE, "16.000000")]
    for dispute in UsageDispute.objects.all():
        transition(
            dispute_id=dispute.public_id,
            to_status="accepted",
            user=_resolver(django_user_model, f"u{dispute.pk}"),
            actor="user:test",
            note="ok",
        )
    run_billing(period=OCT, finalize=True, actor="test", now=AFTER_OCT)
    assert _usage_lines(overrun["tenant"], OCT) == [(LineKind.USAGE, "32.000000")]
    assert UsageDispute.objects.filter(adjustment__isnull=False).count() == 0  # no double charge


def test_usage_on_a_node_never_in_the_allocation_is_held(tenants, small_fleet):
    from fleet.models import Node

    node = Node.objects.order_by("hostname").first()
    nobodys = uuid.uuid4()
    grant = sign_grant(
        MeteringGrant(
            node_id=node.pk,
            tenant_id=tenants[1].pk,
            allocation_id=nobodys,
            sku="h100-sxm-8x",
            gpus=8,
            valid_from=START,
            valid_until=START + timedelta(hours=1),
        )
    )
    event = {**make_event(tenant_id=tenants[1].pk, allocation_id=nobodys, start=START), "grant": grant}
    ingest_meter_events(node_id=node.pk, events=[event], received_at=START + timedelta(hours=1))
    run_billing(period=OCT, finalize=True, actor="test", now=AFTER_OCT)
    assert not Invoice.objects.filter(tenant_id=tenants[1].pk).exists()
    assert "never in allocation" in UsageDispute.objects.get().reason


def test_resolving_needs_the_permission_and_a_note(overrun, client, django_user_model):
    run_billing(period=OCT, finalize=True, actor="test", now=AFTER_OCT)
    dispute = UsageDispute.objects.first()
    url = f"/billing/disputes/{dispute.public_id}/"
    plain_staff = django_user_model.objects.create_user("staff", password="pw-123456789", is_staff=True)
    client.force_login(plain_staff)
    assert client.get("/billing/disputes/").status_code == 200  # may look
    assert b"needs the <code>billing.resolve_usagedispute</code> permission" in client.get(url).content
    assert client.post(url, {"decision": "accept", "note": "sneaky"}).status_code == 403
    member = django_user_model.objects.create_user("member", password="pw-123456789")
    client.force_login(member)
    assert client.post(url, {"decision": "accept", "note": "sneaky"}).status_code == 403  # operators only
    client.force_login(_resolver(django_user_model))
    client.post(url, {"decision": "accept", "note": "   "})
    assert client.get("/nope-404").status_code == 404
    assert client.get("/billing/disputes/not-a-uuid/").status_code == 404
    dispute.refresh_from_db()
    assert dispute.status == "open" and dispute.resolved_at is None


def test_disputes_page_query_count_is_fixed(overrun, client, django_user_model, operator_user):
    client.force_login(operator_user)

    def count() -> tuple[int, int]:
        with (
            CaptureQueriesContext(connections["default"]) as default,
            CaptureQueriesContext(connections["ledger"]) as ledger,
        ):
            assert client.get("/billing/disputes/").status_code == 200
        return len(default), len(ledger)

    run_billing(period=OCT, finalize=False, actor="test", now=AFTER_OCT)
    few = count()
    more = [
        {
            **make_event(
                tenant_id=overrun["tenant"].pk,
                allocation_id=overrun["events"][0]["allocation_id"],
                start=START + timedelta(hours=5 + h),
                seconds=600,
            ),
            "grant": overrun["events"][0]["grant"],
        }
        for h in range(3)
    ]
    result = ingest_meter_events(node_id=overrun["node"].pk, events=more, received_at=START + timedelta(hours=8))
    assert result.accepted == 3
    run_billing(period=OCT, finalize=False, actor="test", now=AFTER_OCT)
    assert count() == few
