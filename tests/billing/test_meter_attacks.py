"""The attacks on metering, written as the attacker's requests: a rented node's agent token (root
on the node can read it) posting usage it has no grant for. Each is refused per event in the
202 answer's `rejected`, kept for operators, and never reaches usage or an invoice."""

import base64
import json
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from django.test import override_settings
from rest_framework.test import APIClient

from billing.grants import MeteringGrant, sign_grant
from billing.models import Invoice, RejectedMeterEvent, UsageEvent
from core.api.agent_tokens import mint_agent_token

from .conftest import LEDGER_DBS, rfc

pytestmark = pytest.mark.django_db(databases=LEDGER_DBS)
METER = "/api/agent/v1/meter-events"
DESIRED = "/api/agent/v1/desired-state"


@pytest.fixture
def rented(tenants, small_fleet):
    """Node A rented by acme since an hour ago; its agent's client and its desired-state grant."""
    from fleet.models import Node
    from tenants.models import Allocation, AllocationNode

    node_a, node_b = Node.objects.order_by("hostname")[:2]
    allocation = Allocation.objects.create(
        tenant=tenants[0], name="train", instance_type=node_a.node_type, node_count=1, state="active"
    )
    started = datetime.now(UTC) - timedelta(hours=1)
    AllocationNode.objects.create(allocation=allocation, node=node_a, started_at=started)
    agent = APIClient()
    agent.credentials(HTTP_AUTHORIZATION=f"Bearer {mint_agent_token(node_a.pk)}")
    desired = agent.get(DESIRED).json()
    [grant] = desired["metering_grants"]
    return {
        "agent": agent,
        "node": node_a,
        "other_node": node_b,
        "allocation": allocation,
        "grant": grant,
        "acme": tenants[0],
        "globex": tenants[1],
        "started": started,
    }


def _event(r, *, seconds=60, ago=timedelta(minutes=5), **override) -> dict:
    start = (datetime.now(UTC) - ago).replace(microsecond=0)
    event = {
        "event_id": str(uuid.uuid4()),
        "grant": r["grant"]["grant"],
        "allocation_id": str(r["allocation"].pk),
        "tenant_id": str(r["acme"].pk),
        "sku": r["grant"]["sku"],
        "start": rfc(start),
        "end": rfc(start + timedelta(seconds=seconds)),
        "quantity": str(8 * seconds),
        "unit": "gpu_second",
    }
    event.update(override)
    return event


def _post(r, *events):
    response = r["agent"].post(METER, {"events": list(events)}, format="json")
    assert response.status_code == 202, response.content
    return response.json()


def _codes(body) -> dict:
    return {item["event_id"]: item["code"] for item in body["rejected"]}


def test_desired_state_hands_the_agent_a_grant_for_its_live_allocation(rented):
    grant = rented["grant"]
    assert grant["allocation_id"] == str(rented["allocation"].pk) and grant["tenant_id"] == str(rented["acme"].pk)
    assert grant["sku"] == rented["node"].node_type.slug and grant["gpus"] == rented["node"].node_type.gpus_per_node
    valid_until = datetime.fromisoformat(grant["valid_until"].replace("Z", "+00:00"))
    assert timedelta(hours=1) < valid_until - datetime.now(UTC) <= timedelta(hours=6)  # a few hours ahead
    assert datetime.fromisoformat(grant["valid_from"].replace("Z", "+00:00")) <= rented["started"]
    body = _post(rented, _event(rented))
    assert (body["accepted"], body["rejected"]) == (1, [])


def test_another_tenants_id_a_made_up_allocation_and_a_billion_gpu_seconds_are_each_refused(rented, globex_api):
    other_tenant = _event(rented, tenant_id=str(rented["globex"].pk))
    no_such_allocation = _event(rented, allocation_id=str(uuid.uuid4()))
    inflated = _event(rented, seconds=1, quantity="3600000000")
    honest = _event(rented)
    body = _post(rented, other_tenant, no_such_allocation, inflated, honest)
    assert body["accepted"] == 1
    assert _codes(body) == {
        other_tenant["event_id"]: "outside_grant",
        no_such_allocation["event_id"]: "outside_grant",
        inflated["event_id"]: "quantity_exceeds_grant",
    }
    assert all(item["detail"] for item in body["rejected"])
    # nothing of it reaches the ledger's usage, the victim's usage view, or an invoice
    assert list(UsageEvent.objects.values_list("event_id", flat=True)) == [honest["event_id"]]
    assert globex_api.get("/api/v1/usage").json()["results"] == []
    from billing.services.runs import run_billing

    now = datetime.now(UTC)
    run_billing(period=now.date().replace(day=1), finalize=False, actor="test")
    assert not Invoice.objects.filter(tenant_id=rented["globex"].pk).exists()
    acme_invoice = Invoice.objects.get(tenant_id=rented["acme"].pk)
    assert str(acme_invoice.lines.get().quantity) == "0.133333"  # the honest minute: 8 GPUs × 60 s
    # ... and every refusal is kept, as sent, for operators
    kept = dict(RejectedMeterEvent.objects.values_list("event_id", "code"))
    assert kept == _codes(body)
    assert RejectedMeterEvent.objects.get(event_id=inflated["event_id"]).node_id == rented["node"].pk


def _tampered(grant: str, **claims) -> str:
    prefix, body, signature = grant.split(".")
    payload = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    payload.update(claims)
    forged = base64.urlsafe_b64encode(json.dumps(payload, separators=(",", ":")).encode()).rstrip(b"=").decode()
    return f"{prefix}.{forged}.{signature}"


def test_missing_forged_foreign_key_and_expired_grants_are_refused(rented):
    grant = rented["grant"]["grant"]
    missing = _event(rented, grant=None)
    empty = _event(rented, grant="")
    forged = _event(
        rented, tenant_id=str(rented["globex"].pk), grant=_tampered(grant, t=rented["globex"].pk.hex)
    )  # claims rewritten, old signature
    garbage = _event(rented, grant={"tenant": "anyone"})
    with override_settings(METERING_GRANT_KEY="a key the attacker made up"):
        foreign = sign_grant(
            MeteringGrant(
                node_id=rented["node"].pk,
                tenant_id=rented["acme"].pk,
                allocation_id=rented["allocation"].pk,
                sku=rented["grant"]["sku"],
                gpus=8,
                valid_from=rented["started"],
                valid_until=datetime.now(UTC),
            )
        )
    own_key = _event(rented, grant=foreign)
    long_ago = datetime.now(UTC) - timedelta(days=30)
    expired_grant = sign_grant(
        MeteringGrant(
            node_id=rented["node"].pk,
            tenant_id=rented["acme"].pk,
            allocation_id=rented["allocation"].pk,
            sku=rented["grant"]["sku"],
            gpus=8,
            valid_from=long_ago,
            valid_until=long_ago + timedelta(hours=4),
        )
    )
    expired = _event(rented, grant=expired_grant, ago=timedelta(days=30) - timedelta(hours=1))
    body = _post(rented, missing, empty, forged, garbage, own_key, expired)
    assert body["accepted"] == 0
    assert _codes(body) == {
        missing["event_id"]: "grant_missing",
        empty["event_id"]: "grant_missing",
        forged["event_id"]: "grant_invalid",
        garbage["event_id"]: "grant_invalid",
        own_key["event_id"]: "grant_invalid",
        expired["event_id"]: "grant_invalid",
    }
    assert UsageEvent.objects.count() == 0
    assert RejectedMeterEvent.objects.count() == 6


def test_a_grant_of_another_node_or_outside_its_window_is_refused(rented):
    # node B's agent replays node A's grant (grants are not secret: they travel with events)
    other_agent = APIClient()
    other_agent.credentials(HTTP_AUTHORIZATION=f"Bearer {mint_agent_token(rented['other_node'].pk)}")
    stolen = _event(rented)
    response = other_agent.post(METER, {"events": [stolen]}, format="json").json()
    assert _codes(response) == {stolen["event_id"]: "outside_grant"} and "node" in response["rejected"][0]["detail"]
    before_grant = _event(rented, ago=timedelta(hours=3))  # before the membership (and grant) began
    future = _event(rented, ago=-timedelta(hours=1))  # inside the grant's window, but not yet happened
    other_sku = _event(rented, sku="a100-sxm-8x" if rented["grant"]["sku"] != "a100-sxm-8x" else "h100-sxm-8x")
    body = _post(rented, before_grant, future, other_sku)
    assert _codes(body) == {e["event_id"]: "outside_grant" for e in (before_grant, future, other_sku)}
    assert "clock" in {item["event_id"]: item["detail"] for item in body["rejected"]}[future["event_id"]]
    assert UsageEvent.objects.count() == 0


def test_a_refused_event_sent_again_is_kept_once_and_can_still_be_sent_right(rented):
    wrong = _event(rented, quantity="481")  # 8 GPUs × 60 s is 480
    _post(rented, wrong)
    _post(rented, wrong)
    assert RejectedMeterEvent.objects.count() == 1
    body = _post(rented, {**wrong, "quantity": "480"})
    assert (body["accepted"], body["rejected"]) == (1, [])
