"""The control plane's side of access delivery, through the API and the loops: readiness gates
`active`, a node that cannot get ready is replaced and the tenant sees why, key and volume
changes reach running nodes until the agents confirm them, and volumes stay the tenant's own."""

import uuid

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleet.choices import AgentAction, AgentActionState, Lifecycle
from fleet.models import Node, NodeAgentAction
from fleet.services.agent_results import record_action_result
from fleet.services.lifecycle import transition_many
from tenants.models import Allocation, AllocationNode
from tenants.services.access import access_spec
from tenants.services.allocation_loop import run_allocation_loop
from tenants.services.tenants import create_tenant

from .conftest import ready_output, tenant_client

pytestmark = pytest.mark.django_db


def new_key() -> str:
    key = ed25519.Ed25519PrivateKey.generate().public_key()
    return key.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()


def post(client, path, body, key):
    return client.post(path, body, format="json", HTTP_IDEMPOTENCY_KEY=key)


def agents_report(action: str, *, ready: bool = True) -> int:
    """Every pending `action` reported by its agent as a real one would (through the service the
    API calls), then the reconciler's move for provisions."""
    rows = list(NodeAgentAction.objects.filter(action=action, state=AgentActionState.PENDING))
    for row in rows:
        params = dict(row.params)
        if action == AgentAction.SYNC_ACCESS:
            allocation = Allocation.objects.get(pk=params["allocation_id"])
            params["access"] = access_spec(allocation)  # what desired-state carries now
        record_action_result(
            node_id=row.node_id,
            action_id=row.pk,
            action=action,
            status="succeeded",
            output=ready_output(params) if ready else {},
        )
    if action == AgentAction.PROVISION:
        done = NodeAgentAction.objects.filter(pk__in=[r.pk for r in rows], state=AgentActionState.SUCCEEDED)
        nodes = list(Node.objects.filter(pk__in=done.values_list("node_id", flat=True)))
        transition_many(nodes, Lifecycle.ACTIVE, actor="test:reconciler", action="provision")
    return len(rows)


@pytest.fixture
def acme(small_fleet):
    tenant = create_tenant(slug="acme", name="Acme", max_nodes=8, actor="test", max_volumes=4, max_storage_gb=1000)[0]
    return tenant, tenant_client(tenant)


def allocate(client, n=2, key="a", **extra):
    body = {"name": "t", "instance_type": "h100-sxm-8x", "node_count": n, **extra}
    r = post(client, "/api/v1/allocations", body, key)
    assert r.status_code == 202, r.content
    run_allocation_loop()
    return r.json()["id"]


def test_a_bare_success_is_not_ready_and_the_allocation_stays_provisioning(acme):
    _, client = acme
    post(client, "/api/v1/ssh-keys", {"name": "k", "public_key": new_key()}, "k")
    allocation_id = allocate(client)
    agents_report(AgentAction.PROVISION, ready=False)
    assert set(NodeAgentAction.objects.filter(action="provision").values_list("state", flat=True)) == {"failed"}
    assert "without the readiness facts" in NodeAgentAction.objects.filter(action="provision").first().detail
    run_allocation_loop()
    assert client.get(f"/api/v1/allocations/{allocation_id}").json()["state"] == "provisioning"


def test_a_node_that_cannot_get_ready_is_replaced_and_the_tenant_sees_why(acme):
    _, client = acme
    allocation_id = allocate(client)
    first = AllocationNode.objects.order_by("node__hostname").first().node
    why = "provision failed 3 times; last: not ready: image h100 2026.11: package not found: nccl 9.9"
    transition_many([first], Lifecycle.PROVISION_FAILED, actor="test:reconciler", action="reconcile", last_error=why)
    run_allocation_loop()
    body = client.get(f"/api/v1/allocations/{allocation_id}").json()
    assert [r["hostname"] for r in body["replaced_nodes"]] == [first.hostname]
    assert (
        "did not get ready" in body["replaced_nodes"][0]["reason"] and "nccl 9.9" in body["replaced_nodes"][0]["reason"]
    )
    assert first.hostname not in {n["hostname"] for n in body["nodes"]} and len(body["nodes"]) == 2
    agents_report(AgentAction.PROVISION)
    run_allocation_loop()
    body = client.get(f"/api/v1/allocations/{allocation_id}").json()
    assert body["state"] == "active" and all(n["ready"] for n in body["nodes"])


def test_key_changes_reach_running_nodes_until_confirmed(acme):
    _, client = acme
    kept = post(client, "/api/v1/ssh-keys", {"name": "kept", "public_key": new_key()}, "k1").json()
    allocation_id = allocate(client)
    agents_report(AgentAction.PROVISION)
    run_allocation_loop()
    assert client.get(f"/api/v1/allocations/{allocation_id}").json()["state"] == "active"

    added = post(client, "/api/v1/ssh-keys", {"name": "added", "public_key": new_key()}, "k2").json()
    body = client.get(f"/api/v1/allocations/{allocation_id}").json()
    assert body["ssh_key_ids"] == sorted([kept["id"], added["id"]])
    assert not any(n["access_confirmed"] for n in body["nodes"])
    assert NodeAgentAction.objects.filter(action="sync_access", state="pending").count() == 2
    # a sync the agent lost (e.g. the node restarted mid-way) is asked again, not forgotten
    NodeAgentAction.objects.filter(action="sync_access").update(state=AgentActionState.CANCELLED)
    run_allocation_loop()
    assert NodeAgentAction.objects.filter(action="sync_access", state="pending").count() == 2
    agents_report(AgentAction.SYNC_ACCESS)
    run_allocation_loop()
    body = client.get(f"/api/v1/allocations/{allocation_id}").json()
    assert all(n["access_confirmed"] for n in body["nodes"])
    assert all(
        sorted(n["facts"]["authorized_keys"]) == sorted([kept["fingerprint"], added["fingerprint"]])
        for n in body["nodes"]
    )


def test_explicit_keys_do_not_follow_new_ones(acme):
    _, client = acme
    only = post(client, "/api/v1/ssh-keys", {"name": "only", "public_key": new_key()}, "k1").json()
    allocation_id = allocate(client, ssh_key_ids=[only["id"]])
    post(client, "/api/v1/ssh-keys", {"name": "later", "public_key": new_key()}, "k2")
    assert client.get(f"/api/v1/allocations/{allocation_id}").json()["ssh_key_ids"] == [only["id"]]
    assert [k["id"] for k in access_spec(Allocation.objects.get(pk=allocation_id))["keys"]] == [only["id"]]


def test_volumes_attach_later_and_another_tenants_volume_is_404(acme):
    tenant, client = acme
    globex = create_tenant(slug="globex", name="Globex", max_nodes=8, actor="test", max_volumes=2)[0]
    theirs = post(tenant_client(globex), "/api/v1/volumes", {"name": "x", "size_gb": 10}, "v").json()["id"]
    mine = post(client, "/api/v1/volumes", {"name": "data", "size_gb": 100}, "v").json()["id"]
    allocation_id = allocate(client)
    agents_report(AgentAction.PROVISION)
    run_allocation_loop()
    url = f"/api/v1/allocations/{allocation_id}/volumes"
    refused = post(client, url, {"volume_id": theirs}, "x1")
    assert refused.status_code == 404
    assert post(client, url, {"volume_id": "not-a-uuid"}, "x2").status_code == 404
    assert not NodeAgentAction.objects.filter(action="sync_access").exists()
    attached = post(client, url, {"volume_id": mine}, "x3")
    assert attached.status_code == 202 and attached.json()["volume_ids"] == [mine]
    assert post(client, url, {"volume_id": mine}, "x4").status_code == 200  # already attached
    spec = access_spec(Allocation.objects.get(pk=allocation_id))
    assert [m["path"] for m in spec["mounts"]] == [f"/mnt/volumes/{mine}"]
    assert NodeAgentAction.objects.filter(action="sync_access", state="pending").count() == 2
    viewer = tenant_client(tenant, role="viewer")
    assert post(viewer, url, {"volume_id": mine}, "x5").status_code == 403
    other = post(tenant_client(globex), url, {"volume_id": theirs}, "x6")
    assert other.status_code == 404  # their token cannot reach this allocation


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(["add", "delete"]), min_size=1, max_size=6))
def test_any_history_of_key_changes_ends_with_exactly_the_tenants_keys_on_the_nodes(acme, history):
    """Metamorphic: whatever the order of adds and deletes, the spec the nodes get equals the
    tenant's key list, and its revision changes exactly when the key set changes."""
    tenant, client = acme
    NodeAgentAction.objects.all().delete()
    AllocationNode.objects.all().delete()
    Allocation.objects.all().delete()
    tenant.ssh_keys.all().delete()
    Node.objects.update(lifecycle=Lifecycle.AVAILABLE)
    run = uuid.uuid4().hex
    allocation_id = allocate(client, key=run)
    allocation = Allocation.objects.get(pk=allocation_id)
    for step, op in enumerate(history):
        before = access_spec(allocation)["revision"]
        keys = list(tenant.ssh_keys.all())
        if op == "add" or not keys:
            post(client, "/api/v1/ssh-keys", {"name": f"k{step}", "public_key": new_key()}, f"{run}-{step}")
        else:
            assert client.delete(f"/api/v1/ssh-keys/{keys[0].pk}").status_code == 204
        allocation.refresh_from_db()
        spec = access_spec(allocation)
        assert {k["fingerprint"] for k in spec["keys"]} == set(tenant.ssh_keys.values_list("fingerprint", flat=True))
        assert spec["revision"] != before and allocation.access_revision == spec["revision"]


def test_drift_on_a_tenants_node_is_reported_to_operators_and_nothing_upgrades_it(acme):
    from django.utils import timezone

    from devtools.services.demo_software import golden_versions
    from fleet.models import NodeType
    from fleet.selectors import drift_report
    from fleet.services.baselines import create_baseline
    from fleet.services.software_inventory import Component, store_software_inventory

    _, client = acme
    node_type = NodeType.objects.get(slug="h100-sxm-8x")
    create_baseline(node_type=node_type, name="g", versions=golden_versions(node_type), actor="test", golden=True)
    allocation_id = allocate(client, n=1)
    agents_report(AgentAction.PROVISION)
    run_allocation_loop()
    assert client.get(f"/api/v1/allocations/{allocation_id}").json()["state"] == "active"
    node = AllocationNode.objects.get().node
    # the tenant (root on the node) installs another driver
    versions = {**golden_versions(node_type), "gpu_driver": "550.54.15"}
    store_software_inventory(
        node=node,
        components=[Component(component=c, version=v, state="ok") for c, v in versions.items()],
        observed_at=timezone.now(),
    )
    groups = [g for g in drift_report().groups if g.component == "gpu_driver"]
    assert [h for g in groups for h in g.drifting.get("550.54.15", [])] == [node.hostname]
    run_allocation_loop()
    assert not NodeAgentAction.objects.filter(node=node, action=AgentAction.UPGRADE).exists()
    assert client.get(f"/api/v1/allocations/{allocation_id}").json()["state"] == "active"


def test_an_active_nodes_desired_state_poll_stays_one_statement_and_follows_a_key_change(acme):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from rest_framework.test import APIClient

    from core.api.agent_tokens import mint_agent_token

    _, client = acme
    first = post(client, "/api/v1/ssh-keys", {"name": "a", "public_key": new_key()}, "k1").json()
    allocate(client, n=1)
    agents_report(AgentAction.PROVISION)
    run_allocation_loop()
    node = AllocationNode.objects.get().node
    agent = APIClient()
    agent.credentials(HTTP_AUTHORIZATION=f"Bearer {mint_agent_token(node.pk)}")
    agent.get("/api/agent/v1/desired-state")  # warms the revocation entry and the access spec
    with CaptureQueriesContext(connection) as ctx:
        quiet = agent.get("/api/agent/v1/desired-state")
    assert len(ctx) == 1, [q["sql"][:80] for q in ctx.captured_queries]
    assert [k["id"] for k in quiet.json()["access"]["keys"]] == [first["id"]]
    second = post(client, "/api/v1/ssh-keys", {"name": "b", "public_key": new_key()}, "k2").json()
    changed = agent.get("/api/agent/v1/desired-state", HTTP_IF_NONE_MATCH=quiet["ETag"])
    assert changed.status_code == 200
    assert sorted(k["id"] for k in changed.json()["access"]["keys"]) == sorted([first["id"], second["id"]])
