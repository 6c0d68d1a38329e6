"""Tenant notifications through the public API, with a real webhook receiver and SMTP server:
endpoints managed by tenant admins, signed deliveries, the delivery log and replay, no event
crossing tenants, the SSRF guard, bounded inputs."""

import re
from pathlib import Path

import pytest

from core.models import OutboxDelivery, OutboxEvent
from core.outbox import deliver_due
from tenants.models import Allocation, WebhookEndpoint
from tenants.notifications import EVENT_TYPES
from tenants.services.allocation_loop import replace_node, run_allocation_loop

from .conftest import provision_succeeds, tenant_client

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_a(tenant_a):
    return tenant_client(tenant_a, role="admin")


@pytest.fixture
def admin_b(tenant_b):
    return tenant_client(tenant_b, role="admin")


def _endpoint(client, url, types=("allocation.degraded", "allocation.active")):
    response = client.post("/api/v1/webhook-endpoints", {"url": url, "event_types": list(types)}, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def _active_allocation(client):
    body = {"name": "train", "instance_type": "h100-sxm-8x", "node_count": 2, "fabric": "isolated"}
    alloc_id = client.post("/api/v1/allocations", body, format="json", HTTP_IDEMPOTENCY_KEY="n1").data["id"]
    run_allocation_loop()
    provision_succeeds()
    run_allocation_loop()
    return Allocation.objects.get(pk=alloc_id)


def test_a_pulled_node_reaches_the_tenants_webhook_signed_and_a_replay_is_identical(
    small_fleet, admin_a, admin_b, client_a, webhook_receiver, smtp_server
):
    created = _endpoint(admin_a, webhook_receiver.url)
    assert (
        created["secret"].startswith("whsec_")
        and "secret" not in admin_a.get("/api/v1/webhook-endpoints").json()["results"][0]
    )
    webhook_receiver.secret = created["secret"]
    other = _endpoint(admin_b, webhook_receiver.url + "-globex")  # another tenant's endpoint, same receiver host
    mail = admin_a.post(
        "/api/v1/notification-recipients",
        {"email": "Ops@Acme.example", "event_types": ["allocation.degraded"]},
        format="json",
    )
    assert mail.status_code == 201 and mail.json()["email"] == "ops@acme.example"

    allocation = _active_allocation(client_a)
    pulled = allocation.memberships.first().node
    replace_node(allocation=allocation, node=pulled, actor="system:health", reason="XID 79")
    deliver_due()

    hooks = [r for r in webhook_receiver.requests if r.path == "/hook"]
    assert [h.json["type"] for h in hooks] == ["allocation.active", "allocation.degraded"]
    degraded = hooks[1]
    assert degraded.signature_ok is True
    assert degraded.json["data"]["allocation"] == str(allocation.pk)
    assert degraded.json["data"]["pulled_node"] == pulled.hostname and degraded.json["tenant"] == str(
        allocation.tenant_id
    )
    assert not [r for r in webhook_receiver.requests if r.path.endswith("-globex")]  # nothing for Globex
    assert len(smtp_server.messages) == 1 and "allocation.degraded" in smtp_server.messages[0]["Subject"]
    assert smtp_server.messages[0]["X-Envelope-To"] == "ops@acme.example"

    log = admin_a.get("/api/v1/notification-deliveries?topic=allocation.degraded").json()["results"]
    webhook_delivery = next(d for d in log if d["channel"] == "tenant-webhook")
    assert webhook_delivery["state"] == "delivered" and webhook_delivery["attempt_log"][0]["status_code"] == 200
    replay = admin_a.post(f"/api/v1/notification-deliveries/{webhook_delivery['id']}/replay")
    assert replay.status_code == 201 and replay.json()["replay_of"] == webhook_delivery["id"]
    deliver_due()
    again = [r for r in webhook_receiver.requests if r.path == "/hook"][-1]
    assert again.body == degraded.body and again.signature_ok  # the identical event, freshly signed
    assert again.headers["Hangar-Event-Id"] == degraded.headers["Hangar-Event-Id"]

    # Globex sees none of it, and reaches none of Acme's objects: 404, like a missing one
    assert admin_b.get("/api/v1/notification-deliveries").json()["results"] == []
    assert admin_b.post(f"/api/v1/notification-deliveries/{webhook_delivery['id']}/replay").status_code == 404
    assert admin_b.get(f"/api/v1/webhook-endpoints/{created['id']}").status_code == 404
    assert (
        admin_b.patch(f"/api/v1/webhook-endpoints/{created['id']}", {"enabled": False}, format="json").status_code
        == 404
    )
    assert admin_b.delete(f"/api/v1/webhook-endpoints/{created['id']}").status_code == 404
    assert admin_b.delete(f"/api/v1/notification-recipients/{mail.json()['id']}").status_code == 404
    assert admin_a.get(f"/api/v1/webhook-endpoints/{other['id']}").status_code == 404
    assert WebhookEndpoint.objects.get(pk=created["id"]).enabled


@pytest.mark.parametrize(
    "url",
    [
        "https://127.0.0.1/hook",
        "https://localhost/hook",
        "https://169.254.169.254/latest/meta-data",
        "https://10.0.0.5/hook",
        "https://192.168.1.10/hook",
        "https://[::1]/hook",
        "https://[::ffff:10.0.0.1]/hook",
        "https://user:pw@example.com/hook",
        "ftp://example.com/hook",
        "https://8.8.8.8:99999/hook",
    ],
)
def test_the_ssrf_guard_refuses_internal_addresses(admin_a, url):
    response = admin_a.post(
        "/api/v1/webhook-endpoints", {"url": url, "event_types": ["allocation.active"]}, format="json"
    )
    assert response.status_code == 400, (url, response.content)
    assert response["Content-Type"].startswith("application/problem+json")
    assert not WebhookEndpoint.objects.exists()


def test_an_operator_allowed_private_range_is_accepted(admin_a, settings):
    from core.netguard import parse_networks

    settings.NOTIFY_ALLOWED_NETWORKS = parse_networks("10.20.0.0/16", setting="NOTIFY_ALLOWED_NETWORKS")
    ok = admin_a.post(
        "/api/v1/webhook-endpoints",
        {"url": "https://10.20.1.2/hook", "event_types": ["allocation.active"]},
        format="json",
    )
    assert ok.status_code == 201
    plain = admin_a.post(
        "/api/v1/webhook-endpoints",
        {"url": "http://10.20.1.2/hook", "event_types": ["allocation.active"]},
        format="json",
    )
    assert plain.status_code == 400  # plain HTTP only where the range is marked +http
    outside = admin_a.post(
        "/api/v1/webhook-endpoints",
        {"url": "https://10.21.1.2/hook", "event_types": ["allocation.active"]},
        format="json",
    )
    assert outside.status_code == 400


def test_only_admins_manage_notifications_and_inputs_are_bounded(tenant_a, admin_a):
    member = tenant_client(tenant_a, role="member")
    assert member.get("/api/v1/webhook-endpoints").status_code == 403
    assert member.get("/api/v1/notification-deliveries").status_code == 403
    body = {"url": "https://8.8.8.8/hook", "event_types": ["allocation.active"]}
    assert member.post("/api/v1/webhook-endpoints", body, format="json").status_code == 403
    for bad in (
        {**body, "event_types": []},
        {**body, "event_types": ["allocation.exploded"]},
        {**body, "event_types": "allocation.active"},
        {**body, "url": "https://example.com/" + "a" * 600},
        {"event_types": ["allocation.active"]},
    ):
        assert admin_a.post("/api/v1/webhook-endpoints", bad, format="json").status_code == 400, bad
    assert admin_a.get("/api/v1/notification-deliveries?state=exploded").status_code == 400
    assert admin_a.get("/api/v1/webhook-endpoints/not-a-uuid").status_code == 404
    for i in range(10):
        assert admin_a.post("/api/v1/webhook-endpoints", body, format="json").status_code == 201, i
    eleventh = admin_a.post("/api/v1/webhook-endpoints", body, format="json")
    assert eleventh.status_code == 400 and "at most 10" in eleventh.json()["detail"]


def test_events_only_for_committed_changes_and_nobody_listening_sends_nothing(small_fleet, client_a, admin_a):
    allocation = _active_allocation(client_a)
    events = OutboxEvent.objects.filter(topic="allocation.active", audience=f"tenant:{allocation.tenant_id}")
    assert events.count() == 1 and not OutboxDelivery.objects.exists()  # no endpoint yet: kept, nothing sent


def test_the_event_catalogue_is_the_documented_one():
    text = (Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text()
    section = text[text.index("### Event catalogue") :]
    section = section[: section.index("\n## ")] if "\n## " in section else section
    documented = set(re.findall(r"^\| `([a-z_]+\.[a-z_]+)` \|", section, flags=re.M))
    assert documented == set(EVENT_TYPES)


def _portal_user(django_user_model, tenant, role, name):
    from core.choices import TenantRole
    from tenants.models import Membership

    user = django_user_model.objects.create_user(username=name, password="pw-portal-test")
    Membership.objects.create(tenant=tenant, user=user, role=getattr(TenantRole, role.upper()))
    return user


def test_the_portal_manages_endpoints_for_admins_only_and_never_another_tenants(
    django_user_model, client, tenant_a, tenant_b, admin_b
):
    other = _endpoint(admin_b, "https://8.8.8.8/globex")
    client.force_login(_portal_user(django_user_model, tenant_a, "member", "acme-member"))
    assert client.get("/portal/notifications/").status_code == 403
    client.force_login(_portal_user(django_user_model, tenant_a, "admin", "acme-admin-2"))
    page = client.post(
        "/portal/notifications/",
        {"do": "add_endpoint", "url": "https://8.8.4.4/acme", "event_types": ["invoice.finalized", "bogus"]},
    )
    assert page.status_code == 200 and "whsec_" in page.content.decode()
    endpoint = WebhookEndpoint.objects.get(tenant=tenant_a)
    assert endpoint.event_types == ["invoice.finalized"]
    refused = client.post(
        "/portal/notifications/",
        {"do": "add_endpoint", "url": "https://10.0.0.1/x", "event_types": ["invoice.finalized"]},
    )
    assert refused.status_code == 400 and "private" in refused.content.decode()
    assert client.post("/portal/notifications/", {"do": "remove_endpoint", "id": other["id"]}).status_code == 404
    assert WebhookEndpoint.objects.filter(pk=other["id"]).exists()
    html = client.get("/portal/notifications/").content.decode()
    assert "https://8.8.4.4/acme" in html and "globex" not in html and "whsec_" not in html


def test_a_finalized_invoice_and_a_credit_note_reach_the_tenants_endpoint(
    small_fleet, admin_a, client_a, webhook_receiver, django_capture_on_commit_callbacks
):
    """Billing writes to the ledger database: the event follows the ledger's commit."""
    from billing.notifications import credit_note_issued, invoices_finalized

    created = _endpoint(admin_a, webhook_receiver.url, types=["invoice.finalized", "credit_note.issued"])
    webhook_receiver.secret = created["secret"]
    tenant_id = WebhookEndpoint.objects.get(pk=created["id"]).tenant_id
    import uuid
    from datetime import date
    from decimal import Decimal
    from types import SimpleNamespace

    invoice_id = uuid.uuid4()
    with django_capture_on_commit_callbacks(using="ledger", execute=True):
        invoices_finalized([(invoice_id, tenant_id, "HANGAR-000042", date(2026, 11, 1), Decimal("12.50"), None)])
        credit_note_issued(
            SimpleNamespace(
                pk=uuid.uuid4(),
                tenant_id=tenant_id,
                number="HANGAR-CN-000001",
                invoice_id=invoice_id,
                total=Decimal("2.00"),
                currency="USD",
                reason="SLA credit",
            )
        )
    deliver_due()
    bodies = [r.json for r in webhook_receiver.requests]
    assert [b["type"] for b in bodies] == ["invoice.finalized", "credit_note.issued"]
    assert bodies[0]["data"]["number"] == "HANGAR-000042" and bodies[0]["data"]["total"] == "12.50"
    assert all(r.signature_ok for r in webhook_receiver.requests)
