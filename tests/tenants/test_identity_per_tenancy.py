"""Identity per tenancy, written as the attack: acme rents a whole node, has root on it, and so
copies the node agent's token. After the rental the node is wiped and placed into globex's
allocation. The copied token must be worth nothing from the moment the wipe begins: no
desired-state (globex's tenant, allocation and grant), no heartbeat (quarantining globex's node),
no meter events (globex's bill), no action results; every refusal is a 401 and is audited. The
node itself gets its next identity only through the one-time handoff published on the
provisioning channel, and returns to the pool only once the new identity's inventory passes the
bring-up ladder and matches the golden baseline."""

import json
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from rest_framework.test import APIClient

from core.api.agent_tokens import mint_agent_token
from core.models import AgentIdentityHandoff, AuditEvent
from core.services.agent_credentials import handoff_path
from fleet.choices import AgentAction, AgentActionState, Lifecycle
from fleet.models import Node, NodeAgentAction, SoftwareBaseline
from fleet.services.reconcile import reconcile_nodes
from health.models import Incident
from tenants.models import Allocation
from tenants.services.allocation_loop import run_allocation_loop

from ..fleet.software_helpers import FULL_STACK, stamp
from .conftest import provision_succeeds

pytestmark = pytest.mark.django_db(databases=["default", "ledger"])

AGENT = "/api/agent/v1/"


def _agent(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def _rent(client, count: int, key: str) -> Allocation:
    body = {"name": "job", "instance_type": "h100-sxm-8x", "node_count": count, "fabric": "isolated"}
    response = client.post("/api/v1/allocations", body, format="json", HTTP_IDEMPOTENCY_KEY=key)
    assert response.status_code == 202, response.content
    run_allocation_loop()
    provision_succeeds()
    run_allocation_loop()
    allocation = Allocation.objects.get(pk=response.data["id"])
    assert allocation.state == "active"
    return allocation


def _report(client: APIClient, action: NodeAgentAction) -> int:
    return client.post(
        AGENT + "action-results",
        {"action_id": str(action.pk), "action": action.action, "status": "succeeded", "finished_at": stamp()},
        format="json",
    ).status_code


def _meter(client: APIClient, grant: dict, *, count: int) -> object:
    start = (datetime.now(UTC) - timedelta(minutes=2)).replace(second=0, microsecond=0)
    events = [
        {
            "event_id": str(uuid.uuid4()),
            "grant": grant["grant"],
            "allocation_id": grant["allocation_id"],
            "tenant_id": grant["tenant_id"],
            "sku": grant["sku"],
            "start": start.isoformat().replace("+00:00", "Z"),
            "end": (start + timedelta(seconds=60)).isoformat().replace("+00:00", "Z"),
            "quantity": "480",
            "unit": "gpu_second",
        }
        for _ in range(count)
    ]
    return client.post(AGENT + "meter-events", {"events": events}, format="json")


def _inventory(client: APIClient, **changes) -> int:
    stack = {**FULL_STACK, **changes}
    components = [{"component": c, "version": v, "state": s} for c, (v, s) in stack.items()]
    return client.post(
        AGENT + "software-inventory", {"observed_at": stamp(), "components": components}, format="json"
    ).status_code


@pytest.fixture
def committed(django_capture_on_commit_callbacks):
    """Run `call()` and what it left for after its transaction (the ledger's revocation list and
    the handoff's publication are written once the move into wiping has committed)."""

    def run(call):
        with django_capture_on_commit_callbacks(execute=True):
            return call()

    return run


def test_a_token_copied_during_a_tenancy_is_refused_after_it_and_the_next_tenant_is_untouched(
    small_fleet, client_a, client_b, tenant_b, committed
):
    acme = _rent(client_a, 1, "acme-1")
    node = Node.objects.get(allocation_memberships__allocation=acme)
    copied = mint_agent_token(node.pk)  # root on the node reads the agent's token
    assert _agent(copied).get(AGENT + "desired-state").status_code == 200

    # The rental ends: the loop stops the workload, the agent confirms, the reconciler starts the wipe.
    assert client_a.post(f"/api/v1/allocations/{acme.pk}/cancel").status_code == 202
    run_allocation_loop()
    stop = NodeAgentAction.objects.get(node=node, action=AgentAction.STOP, state=AgentActionState.PENDING)
    assert _report(_agent(copied), stop) == 202
    committed(reconcile_nodes)
    node.refresh_from_db()
    assert node.lifecycle == Lifecycle.WIPING
    wipe = NodeAgentAction.objects.get(node=node, action=AgentAction.WIPE, state=AgentActionState.PENDING)

    # From the moment the wipe began, the copied token opens nothing.
    acme_grant = {"grant": "x", "allocation_id": str(acme.pk), "tenant_id": str(acme.tenant_id), "sku": "h100-sxm-8x"}
    refused = {
        "desired-state": _agent(copied).get(AGENT + "desired-state"),
        "heartbeat": _agent(copied).post(
            AGENT + "heartbeat", {"observed_at": stamp(), "power_state": "on", "gpus": []}, format="json"
        ),
        "action-results": _agent(copied).post(
            AGENT + "action-results",
            {"action_id": str(wipe.pk), "action": "wipe", "status": "succeeded", "finished_at": stamp()},
            format="json",
        ),
        "meter-events": _meter(_agent(copied), acme_grant, count=3),
        "software-inventory": _agent(copied).post(
            AGENT + "software-inventory", {"observed_at": stamp(), "components": []}, format="json"
        ),
    }
    assert {route: r.status_code for route, r in refused.items()} == dict.fromkeys(refused, 401)
    assert "rotated" in refused["desired-state"].json()["detail"]
    wipe.refresh_from_db()
    assert wipe.state == AgentActionState.PENDING  # the copied token could not report the wipe done
    audited = AuditEvent.objects.filter(action="token.agent_refused", object_id=str(node.pk))
    assert {row.after["route"] for row in audited} == {"control plane", "meter ingest"}
    assert audited.count() == 2  # once per identity and route, not once per request
    assert AuditEvent.objects.filter(action="token.rotate_agent", object_id=str(node.pk)).count() == 1

    # The node's wipe image claims its new identity with the code the provisioning channel serves it.
    handoff = json.loads(handoff_path(node.pk).read_text())
    assert handoff["node_id"] == str(node.pk)
    assert oct(handoff_path(node.pk).stat().st_mode & 0o777) == "0o600"
    guessed = APIClient().post(AGENT + "identity", {"node_id": str(node.pk), "code": "x" * 43}, format="json")
    assert guessed.status_code == 401 and guessed.json()["code"] == "handoff_refused"
    claimed = committed(lambda: APIClient().post(AGENT + "identity", handoff, format="json"))
    assert claimed.status_code == 200, claimed.content
    fresh = claimed.json()["token"]
    assert not handoff_path(node.pk).exists()  # withdrawn from the channel once claimed
    replay = APIClient().post(AGENT + "identity", handoff, format="json")
    assert replay.status_code == 401
    assert AuditEvent.objects.filter(action="token.handoff_replayed", object_id=str(node.pk)).exists()
    assert AgentIdentityHandoff.objects.get(node_id=node.pk).claimed_at is not None
    assert _agent(copied).get(AGENT + "desired-state").status_code == 401  # still nothing for the old one

    # The new identity runs the wipe; the node waits for its inventory, then returns to the pool.
    assert [a["action"] for a in _agent(fresh).get(AGENT + "desired-state").json()["actions"]] == ["wipe"]
    assert _report(_agent(fresh), wipe) == 202
    reconcile_nodes()
    node.refresh_from_db()
    assert node.lifecycle == Lifecycle.WIPING and "waiting for the node's new identity" in node.last_error
    assert _inventory(_agent(fresh)) == 202
    reconcile_nodes()
    node.refresh_from_db()
    assert node.lifecycle == Lifecycle.AVAILABLE

    # globex rents every node, this one among them.
    run_allocation_loop()  # acme's allocation ends: its node's membership closes
    assert Allocation.objects.get(pk=acme.pk).state == "released"
    globex = _rent(client_b, 8, "globex-1")
    assert globex.memberships.filter(node=node, ended_at__isnull=True).exists()
    untouched = Node.objects.get(pk=node.pk)
    assert untouched.lifecycle == Lifecycle.ACTIVE
    # the old token learns nothing of globex, bills nothing to it, and cannot quarantine its node
    desired = _agent(copied).get(AGENT + "desired-state")
    assert desired.status_code == 401 and str(tenant_b.pk) not in desired.content.decode()
    globex_grant = _agent(fresh).get(AGENT + "desired-state").json()["metering_grants"][0]
    assert globex_grant["tenant_id"] == str(tenant_b.pk)
    assert _meter(_agent(copied), globex_grant, count=1000).status_code == 401
    beat = _agent(copied).post(
        AGENT + "heartbeat", {"observed_at": stamp(), "power_state": "on", "gpus": []}, format="json"
    )
    assert beat.status_code == 401
    from health.services.sweep import run_health_sweep

    run_health_sweep()
    node.refresh_from_db()
    assert node.lifecycle == Lifecycle.ACTIVE and not node.cordoned
    assert not Incident.objects.filter(nodes=node).exists()
    assert client_b.get("/api/v1/usage").json()["results"] == []


def test_a_node_whose_stack_changed_during_the_tenancy_does_not_return_to_the_pool(small_fleet, client_a, committed):
    golden = {name: version for name, (version, _state) in FULL_STACK.items()}
    acme = _rent(client_a, 1, "acme-2")
    node = Node.objects.get(allocation_memberships__allocation=acme)
    SoftwareBaseline.objects.create(
        node_type=node.node_type, name="golden", versions=golden, golden=True, created_by="t"
    )
    token = mint_agent_token(node.pk)
    assert _inventory(_agent(token)) == 202  # the tenant's agent says all is well: its word, not evidence
    assert client_a.post(f"/api/v1/allocations/{acme.pk}/cancel").status_code == 202
    run_allocation_loop()
    _report(_agent(token), NodeAgentAction.objects.get(node=node, action=AgentAction.STOP, state="pending"))
    committed(reconcile_nodes)
    wipe = NodeAgentAction.objects.get(node=node, action=AgentAction.WIPE, state=AgentActionState.PENDING)
    assert wipe.params == {"versions": golden, "baseline": "golden"}  # the wipe re-images to the baseline
    fresh = APIClient().post(AGENT + "identity", json.loads(handoff_path(node.pk).read_text()), format="json")
    fresh = fresh.json()["token"]
    assert _report(_agent(fresh), wipe) == 202
    reconcile_nodes()
    node.refresh_from_db()
    assert node.lifecycle == Lifecycle.WIPING  # the reports from the tenancy do not count
    # the wipe image reports a VBIOS that is not the baseline's (flashed from the host during the rental)
    assert _inventory(_agent(fresh), gpu_vbios=("96.00.99.00.66", "ok")) == 202
    reconcile_nodes()
    node.refresh_from_db()
    assert node.lifecycle == Lifecycle.WIPE_FAILED
    assert "golden baseline" in node.last_error and "96.00.99.00.66" in node.last_error


def test_a_handoff_expires_and_a_second_rotation_replaces_the_first(small_fleet, settings, committed):
    from core.services.agent_credentials import rotate_node_identities

    node = Node.objects.first()
    committed(lambda: rotate_node_identities(node_ids=[node.pk], actor="test", reason="first"))
    first = json.loads(handoff_path(node.pk).read_text())
    committed(lambda: rotate_node_identities(node_ids=[node.pk], actor="test", reason="second"))
    second = json.loads(handoff_path(node.pk).read_text())
    assert APIClient().post(AGENT + "identity", first, format="json").status_code == 401
    settings.AGENT_HANDOFF_TTL_SECONDS = 0
    committed(lambda: rotate_node_identities(node_ids=[node.pk], actor="test", reason="third"))
    third = json.loads(handoff_path(node.pk).read_text())
    assert APIClient().post(AGENT + "identity", third, format="json").status_code == 401  # expired at once
    assert second != third


def test_a_report_from_before_the_re_image_does_not_decide(small_fleet, client_a, committed):
    """The wipe image reports its stack when it claims the identity (still the old versions) and
    again once the wipe re-imaged the node: only the second counts."""
    from datetime import timedelta

    from django.utils import timezone

    golden = {name: version for name, (version, _state) in FULL_STACK.items()}
    acme = _rent(client_a, 1, "acme-3")
    node = Node.objects.get(allocation_memberships__allocation=acme)
    SoftwareBaseline.objects.create(
        node_type=node.node_type, name="golden", versions=golden, golden=True, created_by="t"
    )
    token = mint_agent_token(node.pk)
    assert client_a.post(f"/api/v1/allocations/{acme.pk}/cancel").status_code == 202
    run_allocation_loop()
    _report(_agent(token), NodeAgentAction.objects.get(node=node, action=AgentAction.STOP, state="pending"))
    committed(reconcile_nodes)
    fresh = APIClient().post(AGENT + "identity", json.loads(handoff_path(node.pk).read_text()), format="json")
    agent = _agent(fresh.json()["token"])
    old = {**FULL_STACK, "gpu_driver": ("550.90.07", "ok")}
    components = [{"component": c, "version": v, "state": s} for c, (v, s) in old.items()]
    before = timezone.now() - timedelta(seconds=30)
    assert (
        agent.post(
            AGENT + "software-inventory", {"observed_at": stamp(before), "components": components}, format="json"
        ).status_code
        == 202
    )
    wipe = NodeAgentAction.objects.get(node=node, action=AgentAction.WIPE, state=AgentActionState.PENDING)
    assert (
        agent.post(
            AGENT + "action-results",
            {"action_id": str(wipe.pk), "action": "wipe", "status": "succeeded", "finished_at": stamp()},
            format="json",
        ).status_code
        == 202
    )
    reconcile_nodes()
    node.refresh_from_db()
    assert node.lifecycle == Lifecycle.WIPING  # the pre-image report is not the verdict
    assert _inventory(agent) == 202
    reconcile_nodes()
    node.refresh_from_db()
    assert node.lifecycle == Lifecycle.AVAILABLE
