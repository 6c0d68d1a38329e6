"""The whole flow through the public API and the loop, with the agents simulated."""
import pytest
from django.core.management import call_command

from core.models import AuditEvent
from fleet.choices import AgentAction, Lifecycle
from fleet.models import Node, NodeAgentAction
from tenants.models import Allocation, AllocationNode, FabricPartition
from tenants.services.allocation_loop import replace_node, run_allocation_loop

from .conftest import provision_succeeds, stop_and_wipe_succeed

pytestmark = pytest.mark.django_db


def _create(client, key="k1", **body):
    payload = {"name": "train", "instance_type": "h100-sxm-8x", "node_count": 2, "fabric": "isolated", **body}
    return client.post("/api/v1/allocations", payload, format="json", HTTP_IDEMPOTENCY_KEY=key)


def test_create_place_activate_cancel_release(small_fleet, client_a):
    first = _create(client_a)
    assert first.status_code == 202, first.content
    assert first["Location"] == f"/api/v1/allocations/{first.data['id']}"
    assert first.data["state"] == "pending" and first.data["nodes"] == []
    again = _create(client_a)
    assert again.status_code == 202 and again["Idempotent-Replayed"] == "true" and again.data == first.data
    alloc_id = first.data["id"]

    run_allocation_loop()
    body = client_a.get(f"/api/v1/allocations/{alloc_id}").data
    assert body["state"] == "provisioning" and len(body["nodes"]) == 2
    assert body["fabric_partition"] is not None
    nodes = Node.objects.filter(pk__in=[n["id"] for n in body["nodes"]])
    assert {n.lifecycle for n in nodes} == {Lifecycle.PROVISIONING}
    assert len({n.fabric_domain_id for n in nodes}) == 1
    assert NodeAgentAction.objects.filter(action=AgentAction.PROVISION, node__in=nodes).count() == 2

    run_allocation_loop()  # not every node confirmed yet: stays provisioning
    assert client_a.get(f"/api/v1/allocations/{alloc_id}").data["state"] == "provisioning"
    provision_succeeds()
    run_allocation_loop()
    assert client_a.get(f"/api/v1/allocations/{alloc_id}").data["state"] == "active"

    cancel = client_a.post(f"/api/v1/allocations/{alloc_id}/cancel")
    assert cancel.status_code == 202 and cancel.data["state"] == "active" and cancel.data["cancel_requested_at"]
    again = client_a.post(f"/api/v1/allocations/{alloc_id}/cancel")
    assert again.status_code == 202 and again.data["cancel_requested_at"] == cancel.data["cancel_requested_at"]

    run_allocation_loop()
    assert client_a.get(f"/api/v1/allocations/{alloc_id}").data["state"] == "releasing"
    assert {n.lifecycle for n in Node.objects.filter(pk__in=nodes)} == {Lifecycle.RELEASING}
    run_allocation_loop()  # agents have not confirmed: nothing moves on
    assert client_a.get(f"/api/v1/allocations/{alloc_id}").data["state"] == "releasing"
    stop_and_wipe_succeed()
    run_allocation_loop()
    final = client_a.get(f"/api/v1/allocations/{alloc_id}").data
    assert final["state"] == "released" and final["ended_at"] and final["nodes"] == []
    assert {n.lifecycle for n in Node.objects.filter(pk__in=nodes)} == {Lifecycle.AVAILABLE}
    assert not AllocationNode.objects.filter(ended_at__isnull=True).exists()
    assert not AllocationNode.objects.filter(wiped_at__isnull=True).exists()
    terminal = client_a.post(f"/api/v1/allocations/{alloc_id}/cancel")
    assert terminal.status_code == 200 and terminal.data == final
    actions = set(AuditEvent.objects.filter(object_id=alloc_id).values_list("action", flat=True))
    assert {"allocation.create", "allocation.provisioning", "allocation.active", "allocation.releasing",
            "allocation.released", "allocation.cancel_requested"} <= actions
    call_command("isolation_audit")


def test_cancel_while_pending_and_while_provisioning(small_fleet, client_a):
    pending = _create(client_a, key="p").data["id"]
    client_a.post(f"/api/v1/allocations/{pending}/cancel")
    run_allocation_loop()
    assert client_a.get(f"/api/v1/allocations/{pending}").data["state"] == "cancelled"

    prov = _create(client_a, key="q").data["id"]
    run_allocation_loop()
    client_a.post(f"/api/v1/allocations/{prov}/cancel")
    run_allocation_loop()
    assert client_a.get(f"/api/v1/allocations/{prov}").data["state"] == "releasing"
    stop_and_wipe_succeed()
    run_allocation_loop()
    assert client_a.get(f"/api/v1/allocations/{prov}").data["state"] == "cancelled"


def test_pending_past_deadline_fails_with_reason(small_fleet, client_a, tenant_b):
    from datetime import timedelta

    from django.utils import timezone

    alloc = _create(client_a, node_count=8).data["id"]
    Node.objects.filter(lifecycle=Lifecycle.AVAILABLE).update(cordoned=True)  # capacity vanishes after the check
    run_allocation_loop()
    assert Allocation.objects.get(pk=alloc).state == "pending"
    Allocation.objects.filter(pk=alloc).update(state_deadline=timezone.now() - timedelta(seconds=1))
    run_allocation_loop()
    body = client_a.get(f"/api/v1/allocations/{alloc}").data
    assert body["state"] == "failed" and body["failure_reason"].startswith("insufficient capacity")


def test_provisioning_past_deadline_fails_and_releases(small_fleet, client_a):
    from datetime import timedelta

    from django.utils import timezone

    alloc = _create(client_a).data["id"]
    run_allocation_loop()
    Allocation.objects.filter(pk=alloc).update(state_deadline=timezone.now() - timedelta(seconds=1))
    run_allocation_loop()
    body = client_a.get(f"/api/v1/allocations/{alloc}").data
    assert body["state"] == "failed" and "deadline" in body["failure_reason"]
    assert Node.objects.filter(lifecycle=Lifecycle.RELEASING).count() == 2
    stop_and_wipe_succeed()
    run_allocation_loop()
    assert not AllocationNode.objects.filter(ended_at__isnull=True).exists()
    assert Node.objects.filter(lifecycle=Lifecycle.AVAILABLE).count() == 8


def test_unwiped_node_is_never_replaced_and_replacement_restores(small_fleet, client_a, client_b):
    alloc_id = _create(client_a).data["id"]
    run_allocation_loop()
    provision_succeeds()
    run_allocation_loop()
    allocation = Allocation.objects.get(pk=alloc_id)
    pulled = allocation.memberships.first().node
    replacement = replace_node(allocation=allocation, node=pulled, actor="system:health", reason="XID 79")
    assert replacement is not None and replacement.role == "replacement"
    assert replacement.node.fabric_domain_id == pulled.fabric_domain_id
    assert client_a.get(f"/api/v1/allocations/{alloc_id}").data["degraded"] is True
    provision_succeeds()
    run_allocation_loop()
    assert client_a.get(f"/api/v1/allocations/{alloc_id}").data["degraded"] is False
    # The pulled node (not wiped since tenant A) must not go to another tenant even if it looks available.
    Node.objects.filter(pk=pulled.pk).update(lifecycle=Lifecycle.AVAILABLE)
    other = _create(client_b, key="b", node_count=5).data["id"]
    run_allocation_loop()
    placed = set(AllocationNode.objects.filter(allocation_id=other).values_list("node_id", flat=True))
    assert len(placed) == 5 and pulled.pk not in placed
    call_command("isolation_audit")


def test_isolation_audit_flags_a_shared_partition(small_fleet, tenant_a, tenant_b):
    from fleet.models import FabricDomain
    from tenants.services.partitions import create_partition

    domain = FabricDomain.objects.first()
    create_partition(tenant=tenant_a, fabric_domain=domain, name="a", actor="t")
    p = create_partition(tenant=tenant_b, fabric_domain=domain, name="b", actor="t")
    assert FabricPartition.objects.filter(fabric_domain=domain).values("partition_key").distinct().count() == 2
    from tenants.models import Volume
    Volume.objects.create(tenant=tenant_a, name="leak", size_gb=1, export_partition=p)
    with pytest.raises(SystemExit) as exit_:
        call_command("isolation_audit")
    assert exit_.value.code == 1


def test_create_tenant_command_sets_quota_for_every_generation(small_fleet):
    call_command("create_tenant", "initech", "--name", "Initech", "--max-nodes", "4")
    from tenants.models import Quota
    quotas = dict(Quota.objects.filter(tenant__slug="initech").values_list("generation", "max_nodes"))
    assert quotas and set(quotas.values()) == {4} and "hopper" in quotas


def test_run_loops_once_places_pending_allocations(small_fleet, client_a):
    from io import StringIO

    alloc = _create(client_a).data["id"]
    out = StringIO()
    call_command("run_loops", "--once", stdout=out)
    assert "allocation_loop" in out.getvalue()
    assert Allocation.objects.get(pk=alloc).state == "provisioning"
