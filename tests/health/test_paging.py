"""Operator paging end to end, with real receivers: a dark rack opens one incident, one page
reaches the webhook receiver (signature checked) and one e-mail the SMTP server, with one
dedup key; resolving sends the resolve; a receiver that keeps failing is retried with backoff,
then the delivery is dead-lettered, shown, and an operator can retry it."""

from datetime import timedelta

import pytest
from django.utils import timezone

from core.choices import DeliveryState
from core.models import DeliveryAttempt, OutboxDelivery, OutboxEvent
from core.outbox import deliver_due
from fleet.models import Node
from health.choices import IncidentScope, IncidentState, PagingKind, PagingTier
from health.models import Incident, PagingChannel
from health.services.paging import acknowledge_page, page_incidents, resolve_page
from health.services.sweep import run_health_sweep

from .test_lapses import Clock, _beat

pytestmark = pytest.mark.django_db


@pytest.fixture
def clock(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(timezone, "now", clock.now)
    return clock


@pytest.fixture
def channels(webhook_receiver, smtp_server):
    hook = PagingChannel.objects.create(
        name="on-call webhook", kind=PagingKind.WEBHOOK, url=webhook_receiver.url, secret=webhook_receiver.secret
    )
    mail = PagingChannel.objects.create(name="on-call mail", kind=PagingKind.EMAIL, recipients="oncall@example.com")
    return hook, mail


def _dark_rack(nodes):
    """Four nodes in one rack, each behind its own leaf port: the rack is the shared cause."""
    rack = nodes[0].rack_id
    taken = set(Node.objects.filter(rack_id=rack).values_list("u_position", flat=True))
    free = iter(u for u in range(1, 43) if u not in taken)
    for i, node in enumerate(nodes[:4]):
        moved = {"rack_id": rack, "u_position": next(free)} if node.rack_id != rack else {}
        Node.objects.filter(pk=node.pk).update(leaf_switch=f"leaf-{i}", **moved)
    return nodes[:4], nodes[4:]


def test_a_dark_rack_pages_once_by_webhook_and_email_with_one_dedup_key(
    nodes, agent_for, clock, channels, webhook_receiver, smtp_server, operator_client
):
    dark, lit = _dark_rack(nodes)
    agents = {n.pk: agent_for(n) for n in nodes}
    _beat(list(agents.values()), clock, 60)
    _beat([agents[n.pk] for n in lit], clock, 120)  # the rack goes dark for two minutes
    incident = Incident.objects.get()
    assert incident.scope == IncidentScope.RACK and incident.nodes.count() == 4
    page_incidents(clock.now())  # the paging loop finds nothing more to page: one page per incident
    run_health_sweep(now=clock.now())
    assert deliver_due(now=clock.now()) == {"delivered": 2, "retrying": 0, "dead": 0}

    assert len(webhook_receiver.requests) == 1
    hook = webhook_receiver.requests[0]
    assert hook.signature_ok is True and hook.json["type"] == "incident.trigger"
    key = hook.json["dedup_key"]
    assert key == f"hangar-incident-{incident.pk}"
    assert set(hook.json["data"]["nodes"]) == {n.hostname for n in dark}
    assert hook.json["data"]["url"].endswith(f"/health/incidents/{incident.pk}/")
    assert len(smtp_server.messages) == 1
    mail = smtp_server.messages[0]
    assert mail["X-Hangar-Dedup-Key"] == key and "TRIGGER" in mail["Subject"]
    assert mail["X-Envelope-To"] == "oncall@example.com" and key in mail.get_payload()

    # nothing more on the next passes
    _beat([agents[n.pk] for n in lit], clock, 30)
    page_incidents(clock.now())
    deliver_due(now=clock.now())
    assert len(webhook_receiver.requests) == 1 and len(smtp_server.messages) == 1

    # the rack comes back: the incident closes, the paging loop resolves the page, both hear it
    _beat(list(agents.values()), clock, 30)
    incident.refresh_from_db()
    assert incident.state == IncidentState.CLOSED
    assert page_incidents(clock.now())["resolved"] == 1
    deliver_due(now=clock.now())
    assert [r.json["type"] for r in webhook_receiver.requests] == ["incident.trigger", "incident.resolve"]
    assert webhook_receiver.requests[1].json["dedup_key"] == key and webhook_receiver.requests[1].signature_ok
    assert smtp_server.messages[1]["X-Hangar-Dedup-Key"] == key and "RESOLVE" in smtp_server.messages[1]["Subject"]

    # the log page shows both pages and their deliveries
    log = operator_client.get("/notifications/").content.decode()
    assert "incident.trigger" in log and "incident.resolve" in log and "on-call webhook" in log


def test_a_receiver_failing_three_times_is_retried_with_backoff_then_dead_lettered(
    nodes, clock, channels, webhook_receiver, settings, operator_user, ops_api
):
    from health.services.incidents import open_operator_incident

    settings.NOTIFY_MAX_ATTEMPTS, settings.NOTIFY_BACKOFF_BASE_S = 3, 30
    PagingChannel.objects.filter(kind=PagingKind.EMAIL).update(enabled=False)
    webhook_receiver.status = 500
    incident = open_operator_incident(nodes=[nodes[0]], title="PDU alarm", severity="fatal", actor="user:op")
    delivery = OutboxDelivery.objects.get(channel="paging-webhook")
    start = clock.now()
    assert deliver_due(now=start)["retrying"] == 1
    delivery.refresh_from_db()
    assert delivery.next_attempt_at == start + timedelta(seconds=30)
    assert deliver_due(now=start + timedelta(seconds=29))["retrying"] == 0  # not before its backoff
    assert deliver_due(now=start + timedelta(seconds=30))["retrying"] == 1
    delivery.refresh_from_db()
    assert delivery.next_attempt_at == start + timedelta(seconds=30 + 60)  # doubled
    assert deliver_due(now=start + timedelta(seconds=90))["dead"] == 1
    delivery.refresh_from_db()
    assert delivery.state == DeliveryState.DEAD and delivery.attempts == 3 and "HTTP 500" in delivery.last_error
    log = list(DeliveryAttempt.objects.filter(delivery=delivery).values_list("ok", "status_code"))
    assert log == [(False, 500)] * 3 and len(webhook_receiver.requests) == 3
    assert all(r.signature_ok for r in webhook_receiver.requests)
    assert deliver_due(now=start + timedelta(hours=2)) == {"delivered": 0, "retrying": 0, "dead": 0}

    # shown as dead-lettered, and an operator retries it once the receiver is back
    listed = ops_api.get("/api/v1/ops/notification-deliveries?state=dead").json()
    assert [d["id"] for d in listed["results"]] == [str(delivery.pk)]
    assert listed["results"][0]["attempts"] == 3 and listed["results"][0]["destination"] == "on-call webhook"
    webhook_receiver.status = 200
    assert ops_api.post(f"/api/v1/ops/notification-deliveries/{delivery.pk}/retry").status_code == 200
    assert deliver_due(now=timezone.now())["delivered"] == 1
    assert ops_api.post(f"/api/v1/ops/notification-deliveries/{delivery.pk}/retry").status_code == 409
    assert incident.pk


def test_severity_decides_who_is_paged_and_info_pages_nobody(nodes, clock):
    from health.services.incidents import open_operator_incident

    fatal_only = PagingChannel.objects.create(
        name="critical", kind=PagingKind.PAGERDUTY, secret="R0UTINGKEY", min_severity="fatal"
    )
    everyone = PagingChannel.objects.create(name="team", kind=PagingKind.PAGERDUTY, secret="R0UTINGKEY2")
    open_operator_incident(nodes=[nodes[0]], title="fan noise", severity="info", actor="user:op")
    assert not OutboxEvent.objects.exists()
    open_operator_incident(nodes=[nodes[1]], title="temperature", severity="warn", actor="user:op")
    open_operator_incident(nodes=[nodes[2]], title="Xid 79", severity="fatal", actor="user:op")
    targets = {(e.payload["title"], d.target) for e in OutboxEvent.objects.all() for d in e.deliveries.all()}
    assert targets == {
        ("temperature", str(everyone.pk)),
        ("Xid 79", str(everyone.pk)),
        ("Xid 79", str(fatal_only.pk)),
    }


def test_an_unacknowledged_page_escalates_and_an_acknowledged_one_does_not(nodes, clock):
    from health.services.incidents import open_operator_incident

    PagingChannel.objects.create(name="primary", kind=PagingKind.PAGERDUTY, secret="K1")
    boss = PagingChannel.objects.create(
        name="manager", kind=PagingKind.PAGERDUTY, secret="K2", tier=PagingTier.ESCALATION, escalate_after_minutes=15
    )
    a = open_operator_incident(nodes=[nodes[0]], title="A", severity="fatal", actor="user:op")
    b = open_operator_incident(nodes=[nodes[1]], title="B", severity="fatal", actor="user:op")
    clock.advance(10 * 60)
    acknowledge_page(b, actor="user:op")
    assert page_incidents(clock.now())["escalated"] == 0
    clock.advance(6 * 60)
    assert page_incidents(clock.now())["escalated"] == 1
    assert page_incidents(clock.now())["escalated"] == 1  # level-triggered, but the dedup key sends it once
    escalations = OutboxDelivery.objects.filter(event__topic="incident.escalate")
    assert [(d.target, d.event.subject) for d in escalations] == [(str(boss.pk), f"incident:{a.pk}")]
    # acknowledging and resolving tell every channel that was paged, the escalation one included
    acknowledge_page(a, actor="user:op")
    resolve_page(a, actor="user:op")
    told = OutboxDelivery.objects.filter(event__subject=f"incident:{a.pk}", event__topic="incident.resolve")
    assert {d.target for d in told} == {str(boss.pk), str(PagingChannel.objects.get(name="primary").pk)}


def test_acknowledge_and_resolve_through_the_api_and_the_console_tell_pagerduty(
    nodes, clock, webhook_receiver, ops_api, operator_client, settings
):
    """PagerDuty Events API v2 at a configurable URL (here the local receiver): trigger with the
    payload, acknowledge and resolve with the same dedup_key."""
    from health.services.incidents import open_operator_incident

    PagingChannel.objects.create(name="pd", kind=PagingKind.PAGERDUTY, url=webhook_receiver.url, secret="R0UTE")
    incident = open_operator_incident(nodes=[nodes[0]], title="Xid 79", severity="fatal", actor="user:op")
    deliver_due(now=clock.now())
    response = ops_api.post(f"/api/v1/ops/incidents/{incident.pk}/acknowledge")
    assert response.status_code == 200 and response.json()["page_acknowledged_by"].startswith("user:")
    html = operator_client.get(f"/health/incidents/{incident.pk}/").content.decode()
    assert "Acknowledged by" in html and "Resolve page" in html
    assert operator_client.post(f"/health/incidents/{incident.pk}/page/", {"do": "resolve"}).status_code == 302
    deliver_due(now=clock.now())
    bodies = [r.json for r in webhook_receiver.requests]
    assert [b["event_action"] for b in bodies] == ["trigger", "acknowledge", "resolve"]
    assert {b["dedup_key"] for b in bodies} == {f"hangar-incident-{incident.pk}"}
    assert bodies[0]["routing_key"] == "R0UTE" and bodies[0]["payload"]["severity"] == "critical"
    assert bodies[0]["payload"]["summary"] == "[fatal] Xid 79" and bodies[0]["links"][0]["href"].endswith(
        f"/health/incidents/{incident.pk}/"
    )
    assert ops_api.post(f"/api/v1/ops/incidents/{incident.pk}/acknowledge").status_code == 409  # resolved
    assert ops_api.post("/api/v1/ops/incidents/not-an-id/acknowledge").status_code == 404


def test_the_admin_refuses_private_urls_and_sends_a_test_page(admin_client, webhook_receiver, smtp_server):
    add = "/admin/health/pagingchannel/add/"
    base = {"kind": "webhook", "tier": "primary", "min_severity": "warn", "escalate_after_minutes": 15, "enabled": "on"}
    for url in ("https://127.0.0.1/hook", "https://169.254.169.254/latest", "https://10.1.2.3/hook"):
        response = admin_client.post(add, {**base, "name": f"bad {url}", "url": url, "secret": "s"})
        assert response.status_code == 200 and not PagingChannel.objects.exists(), url
    response = admin_client.post(add, {**base, "name": "ok", "url": webhook_receiver.url, "secret": "s3cret"})
    assert response.status_code == 302
    channel = PagingChannel.objects.get()
    change = f"/admin/health/pagingchannel/{channel.pk}/change/"
    assert "s3cret" not in admin_client.get(change).content.decode()  # never shown again
    kept = admin_client.post(change, {**base, "name": "renamed", "url": webhook_receiver.url, "secret": ""})
    assert kept.status_code == 302
    channel.refresh_from_db()
    assert channel.name == "renamed" and channel.secret == "s3cret"  # empty keeps the secret
    response = admin_client.post(
        "/admin/health/pagingchannel/", {"action": "send_test", "_selected_action": [str(channel.pk)]}
    )
    assert response.status_code == 302
    deliver_due()
    assert [r.json["type"] for r in webhook_receiver.requests] == ["paging.test"]
    assert webhook_receiver.requests[0].signature_ok is False  # signed with the channel's secret, not the receiver's
    from core.models import AuditEvent

    trail = [str(a) for a in AuditEvent.objects.values_list("before", "after")]
    assert trail and not [row for row in trail if "s3cret" in row]


def test_every_severity_has_a_pagerduty_severity():
    """A severity added to the policy (hold, defer) must not fall back to a guess in PagerDuty."""
    from health.choices import Severity
    from health.notifications import PAGERDUTY_SEVERITY

    assert set(PAGERDUTY_SEVERITY) == set(Severity.values)
    assert set(PAGERDUTY_SEVERITY.values()) <= {"critical", "error", "warning", "info"}
