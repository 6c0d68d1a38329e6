"""PagerDuty V3 webhooks read back into Hangar: an acknowledgement or resolution made in PagerDuty
acknowledges or resolves the Hangar page through the console's services, the other channels hear
of it, PagerDuty is not told what it told us, a redelivered event changes nothing, and the
attacker's requests (no/bad signature, huge body, someone else's incident) change nothing."""

import hashlib
import hmac
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.models import OutboxDelivery, OutboxEvent
from core.outbox import deliver_due
from health.choices import PagingKind
from health.models import Incident, PagingChannel
from health.services.incidents import open_operator_incident
from health.services.pagerduty_inbound import MAX_BODY_BYTES, signature_valid

pytestmark = pytest.mark.django_db
URL = "/api/v1/hooks/pagerduty"
SECRET = "pd-webhook-secret"
OLD_SECRET = "pd-webhook-secret-before-rotation"


def pd_event(event_type: str, incident_key: str | None, *, event_id: str = "01EVT", pd_id: str = "PGR0VU2") -> bytes:
    """A V3 webhook body shaped like PagerDuty's documented example (developer.pagerduty.com,
    Webhooks › Overview › Webhook Payload)."""
    data = {"id": pd_id, "type": "incident", "status": event_type.split(".")[-1], "title": "[fatal] Xid 79"}
    if incident_key is not None:
        data["incident_key"] = incident_key
    document = {
        "event": {
            "id": event_id,
            "event_type": event_type,
            "resource_type": "incident",
            "occurred_at": "2026-12-05T12:00:00.000Z",
            "agent": {"id": "PLH1HKV", "summary": "Tenex Engineer", "type": "user_reference"},
            "client": {"name": "PagerDuty"},
            "data": data,
        }
    }
    return json.dumps(document).encode()


def sign(body: bytes, *secrets: str) -> str:
    return ",".join(f"v1={hmac.new(s.encode(), body, hashlib.sha256).hexdigest()}" for s in secrets)


def post(api, body: bytes, signature: str | None = None):
    headers = {"HTTP_X_PAGERDUTY_SIGNATURE": sign(body, SECRET) if signature is None else signature}
    return api.post(URL, data=body, content_type="application/json", **headers)


@pytest.fixture(autouse=True)
def _secret(settings):
    settings.PAGERDUTY_WEBHOOK_SECRETS = (SECRET,)


@pytest.fixture
def paged(nodes, webhook_receiver):
    """An incident paged to PagerDuty (Events API v2 at the local receiver) and to a webhook."""
    PagingChannel.objects.create(name="pd", kind=PagingKind.PAGERDUTY, url=webhook_receiver.url, secret="R0UTE")
    PagingChannel.objects.create(
        name="hook", kind=PagingKind.WEBHOOK, url=webhook_receiver.url, secret=webhook_receiver.secret
    )
    incident = open_operator_incident(nodes=[nodes[0]], title="Xid 79", severity="fatal", actor="user:op")
    deliver_due()
    assert len(webhook_receiver.requests) == 2
    return incident


def _told(webhook_receiver) -> list[str]:
    """What each receiver heard, in order: PagerDuty's event_action or the webhook's type."""
    return [r.json.get("event_action") or r.json["type"] for r in webhook_receiver.requests]


def test_acknowledged_then_resolved_in_pagerduty_reaches_hangar_and_the_other_channels_only(
    paged, api, webhook_receiver
):
    key = f"hangar-incident-{paged.pk}"
    response = post(api, pd_event("incident.acknowledged", key))
    assert response.status_code == 200, response.content
    assert response.json() == {
        "result": "acknowledged",
        "detail": "Page acknowledged in Hangar by pagerduty:Tenex Engineer.",
        "incident": str(paged.pk),
    }
    paged.refresh_from_db()
    assert paged.page_acknowledged_by == "pagerduty:Tenex Engineer" and paged.page_resolved_at is None
    assert paged.events.filter(detail="page acknowledged in PagerDuty (PGR0VU2)").exists()
    deliver_due()
    assert sorted(_told(webhook_receiver)[:2]) == ["incident.trigger", "trigger"]
    assert _told(webhook_receiver)[2:] == ["incident.acknowledge"]  # no echo to PagerDuty

    # PagerDuty redelivers the same event: harmless
    again = post(api, pd_event("incident.acknowledged", key))
    assert again.status_code == 200 and again.json()["result"] == "unchanged"
    assert OutboxEvent.objects.filter(topic="incident.acknowledge").count() == 1

    assert post(api, pd_event("incident.resolved", key, event_id="02EVT")).json()["result"] == "resolved"
    deliver_due()
    assert _told(webhook_receiver)[3:] == ["incident.resolve"]
    paged.refresh_from_db()
    assert paged.page_resolved_at is not None
    # a late acknowledgement after the resolve changes nothing and is not retried by PagerDuty
    late = post(api, pd_event("incident.acknowledged", key, event_id="03EVT"))
    assert late.status_code == 200 and late.json()["result"] == "unchanged"
    assert post(api, pd_event("incident.resolved", key, event_id="02EVT")).json()["result"] == "unchanged"
    deliver_due()
    assert len(webhook_receiver.requests) == 4


def test_acknowledging_in_hangar_still_tells_pagerduty(paged, ops_api, webhook_receiver):
    """The echo guard is only for changes that came from PagerDuty."""
    assert ops_api.post(f"/api/v1/ops/incidents/{paged.pk}/acknowledge").status_code == 200
    deliver_due()
    assert sorted(_told(webhook_receiver)[2:]) == ["acknowledge", "incident.acknowledge"]


def test_a_rotated_secret_and_several_signatures_are_accepted(paged, api, settings):
    settings.PAGERDUTY_WEBHOOK_SECRETS = (SECRET, OLD_SECRET)
    body = pd_event("incident.acknowledged", f"hangar-incident-{paged.pk}")
    assert post(api, body, signature=f"v1={'0' * 64}, {sign(body, OLD_SECRET)}").status_code == 200


def _unchanged(incident):
    incident.refresh_from_db()
    assert incident.page_acknowledged_at is None and incident.page_resolved_at is None
    assert not OutboxDelivery.objects.filter(event__topic="incident.acknowledge").exists()


@pytest.mark.parametrize(
    "signature",
    [
        "",
        "v1=",
        "v0=" + "a" * 64,
        "v1=" + "a" * 64,
        sign(b"another body", SECRET),
        sign(b"{}", "not-the-secret"),
        ",".join(["v1=" + "b" * 64] * 500),
    ],
)
def test_a_missing_or_wrong_signature_is_401_and_changes_nothing(paged, api, signature):
    body = pd_event("incident.acknowledged", f"hangar-incident-{paged.pk}")
    response = post(api, body, signature=signature)
    assert response.status_code == 401
    assert response.headers["Content-Type"] == "application/problem+json"
    assert response.json()["code"] == "pagerduty_signature_invalid"
    _unchanged(paged)


def test_without_a_configured_secret_nothing_is_read(paged, api, settings):
    settings.PAGERDUTY_WEBHOOK_SECRETS = ()
    response = post(api, pd_event("incident.acknowledged", f"hangar-incident-{paged.pk}"))
    assert response.status_code == 503 and response.json()["code"] == "pagerduty_hook_off"
    _unchanged(paged)


def test_a_body_over_the_bound_is_413(paged, api):
    body = json.dumps({"event": {"event_type": "incident.acknowledged", "pad": "x" * MAX_BODY_BYTES}}).encode()
    response = post(api, body)
    assert response.status_code == 413 and response.json()["code"] == "payload_too_large"
    _unchanged(paged)


def test_someone_elses_incident_and_other_event_types_are_ignored_with_202(paged, api):
    for body in (
        pd_event("incident.acknowledged", "d3640fbd41094207a1c11e58e46b1662"),  # another service's key
        pd_event("incident.acknowledged", None),  # no key at all
        pd_event("incident.acknowledged", "hangar-incident-not-a-uuid-at-all-0000000000"),
        pd_event("incident.triggered", f"hangar-incident-{paged.pk}"),
        pd_event("pagey.ping", None),
    ):
        response = post(api, body)
        assert response.status_code == 202 and response.json()["result"] == "ignored", body
    _unchanged(paged)


def test_an_unknown_hangar_incident_is_404(paged, api):
    response = post(api, pd_event("incident.resolved", "hangar-incident-00000000-0000-7000-8000-000000000000"))
    assert response.status_code == 404 and response.json()["code"] == "pagerduty_incident_unknown"
    _unchanged(paged)


@pytest.mark.parametrize("body", [b"not json", b"[]", b'{"event": []}', b'{"event": {"event_type": 7}}', b"\xff\xfe"])
def test_a_signed_body_that_is_not_a_v3_event_is_400(paged, api, body):
    response = post(api, body)
    assert response.status_code == 400 and response.json()["code"] in {"parse_error", "validation_error"}
    _unchanged(paged)


def test_get_is_not_allowed(api):
    assert api.get(URL).status_code == 405


@settings(max_examples=60, deadline=None)
@given(body=st.binary(max_size=256), secret=st.text(min_size=1, max_size=40), decoys=st.integers(0, 2))
def test_signature_holds_for_its_body_and_secret_only(body, secret, decoys):
    header = ",".join([f"v1={'c' * 64}"] * decoys + [sign(body, secret)])
    assert signature_valid(body, header, (secret,))
    assert not signature_valid(body + b"x", header, (secret,))
    assert not signature_valid(body, header, (secret + "x",))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(history=st.lists(st.sampled_from(["incident.acknowledged", "incident.resolved"]), min_size=1, max_size=4))
def test_any_order_of_redelivered_events_ends_as_the_first_resolve_says(nodes, api, history):
    """Random sequences (repeats = redeliveries, acknowledgements after the resolve): the page is
    resolved iff a resolve arrived, acknowledged iff an acknowledgement came before it; Hangar
    tells the other channels at most once each, PagerDuty never."""
    PagingChannel.objects.all().delete()
    PagingChannel.objects.create(name="pd", kind=PagingKind.PAGERDUTY, secret="R0UTE")
    PagingChannel.objects.create(name="hook", kind=PagingKind.WEBHOOK, url="https://hooks.example.com/x", secret="s")
    incident = open_operator_incident(nodes=[nodes[0]], title="Xid 79", severity="fatal", actor="user:op")
    for event_type in history:
        assert post(api, pd_event(event_type, f"hangar-incident-{incident.pk}")).status_code == 200
    incident = Incident.objects.get(pk=incident.pk)
    first_resolve = history.index("incident.resolved") if "incident.resolved" in history else len(history)
    assert (incident.page_resolved_at is not None) == ("incident.resolved" in history)
    assert (incident.page_acknowledged_at is not None) == ("incident.acknowledged" in history[:first_resolve])
    told = OutboxDelivery.objects.filter(event__subject=f"incident:{incident.pk}").exclude(
        event__topic="incident.trigger"
    )
    assert not told.filter(channel="paging-pagerduty").exists()
    assert told.filter(event__topic="incident.acknowledge").count() <= 1
    assert told.filter(event__topic="incident.resolve").count() == ("incident.resolved" in history)
