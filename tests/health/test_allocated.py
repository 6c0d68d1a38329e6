"""XID 79 on a node a tenant is using: the whole chain within one sweep."""

import pytest
from django.utils import timezone

from fleet.choices import AgentAction, AgentActionState, Lifecycle
from fleet.models import NodeAgentAction
from fleet.services.lifecycle import transition
from health.choices import IncidentState
from health.models import Incident, IncidentImpact
from health.services.sweep import run_health_sweep
from tenants.models import Allocation, AllocationNode, Tenant

pytestmark = pytest.mark.django_db


@pytest.fixture
def allocated(nodes, agent_for):
    for other in nodes:  # every node's agent is alive, so the fleet is healthy and placeable
        agent_for(other).heartbeat()
    tenant = Tenant.objects.create(slug="acme", name="Acme")
    node = nodes[0]
    allocation = Allocation.objects.create(
        tenant=tenant,
        name="train",
        instance_type=node.node_type,
        node_count=1,
        fabric_domain=node.fabric_domain,
        state="active",
    )
    transition(node, Lifecycle.PROVISIONING, actor="test", action="provision")
    transition(node, Lifecycle.ACTIVE, actor="test", action="provisioned")
    AllocationNode.objects.create(allocation=allocation, node=node, started_at=timezone.now())
    return allocation, node


def test_xid79_on_allocated_node_opens_incident_and_records_impact(allocated, agent_for):
    allocation, node = allocated
    agent_for(node).heartbeat(faults={6: {"xid_errors": [79]}})
    run_health_sweep()
    node.refresh_from_db()
    assert node.lifecycle in (Lifecycle.DRAINING, Lifecycle.REMEDIATING)
    assert node.cordoned and node.attribution == "provider"
    incident = Incident.objects.get()
    # within one sweep: pulled, replaced, and (the tenant being off it) sent to remediation
    assert incident.state == IncidentState.DIAGNOSED and incident.signals == ["xid_79"]
    impact = IncidentImpact.objects.get()
    assert (impact.allocation_id, impact.tenant_id, impact.gpus) == (allocation.pk, allocation.tenant_id, 8)
    assert any("replacement" in e.detail for e in incident.events.all())
    run_health_sweep()  # idempotent: no second incident, no second impact
    assert Incident.objects.count() == 1 and IncidentImpact.objects.count() == 1


def test_allocation_degraded_and_replacement_placed(allocated, agent_for):
    allocation, node = allocated
    agent_for(node).heartbeat(faults={6: {"xid_errors": [79]}})
    run_health_sweep()
    allocation.refresh_from_db()
    node.refresh_from_db()
    assert allocation.degraded
    assert not AllocationNode.objects.filter(node=node, ended_at__isnull=True).exists()
    replacement = AllocationNode.objects.get(allocation=allocation, ended_at__isnull=True)
    assert replacement.node.node_type.generation == node.node_type.generation
    assert replacement.node.fabric_domain_id == node.fabric_domain_id
    assert node.lifecycle == Lifecycle.REMEDIATING


@pytest.mark.django_db(databases=["default", "ledger"])
def test_node_pulled_from_a_tenant_is_wiped_before_reuse_and_the_tenant_credited(allocated, agent_for):
    from billing.models import Adjustment
    from fleet.services.reconcile import reconcile_pass
    from tenants.services.allocation_loop import run_allocation_loop

    from ..fleet.software_helpers import report_stack

    allocation, node = allocated
    agent = agent_for(node)
    agent.heartbeat(faults={6: {"xid_errors": [79]}})
    run_health_sweep()
    NodeAgentAction.objects.filter(node=node, action=AgentAction.REBOOT).update(state=AgentActionState.SUCCEEDED)
    run_health_sweep()
    agent.report(dcgm_r3="pass", nccl_allreduce="pass", ib_link="pass")
    run_health_sweep()
    node.refresh_from_db()
    assert node.lifecycle == Lifecycle.WIPING  # passed the gate, but the tenant's data is still on it
    assert IncidentImpact.objects.get().credited
    credit = Adjustment.objects.get(kind="sla_credit")
    assert credit.tenant_id == allocation.tenant_id and credit.amount < 0
    wipe = NodeAgentAction.objects.get(node=node, action=AgentAction.WIPE, state=AgentActionState.PENDING)
    wipe.state = AgentActionState.SUCCEEDED
    wipe.save()
    report_stack(node)  # the wiped node's new identity reports its stack
    reconcile_pass()
    run_allocation_loop()
    node.refresh_from_db()
    assert node.lifecycle == Lifecycle.AVAILABLE
    assert AllocationNode.objects.get(node=node).wiped_at is not None  # placeable again


def test_failed_replacement_never_undoes_the_pull(allocated, agent_for, monkeypatch):
    def replace_node(**kwargs):
        raise RuntimeError("no same-fabric capacity")

    monkeypatch.setattr("health.services.sweep.replace_node", replace_node)
    allocation, node = allocated
    agent_for(node).heartbeat(faults={6: {"xid_errors": [79]}})
    run_health_sweep()
    node.refresh_from_db()
    assert node.lifecycle == Lifecycle.DRAINING and node.cordoned
    assert any("no same-fabric capacity" in e.detail for e in Incident.objects.get().events.all())
