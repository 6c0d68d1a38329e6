"""XID 79 on a node a tenant is using: the whole chain within one sweep."""
import importlib

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


def _has(module: str, name: str) -> bool:
    try:
        return hasattr(importlib.import_module(module), name)
    except ImportError:
        return False


HAS_REPLACE = _has("tenants.services.allocations", "replace_node")
HAS_CREDITS = _has("billing.services.credits", "record_sla_credit")


@pytest.fixture
def allocated(nodes):
    tenant = Tenant.objects.create(slug="acme", name="Acme")
    node = nodes[0]
    allocation = Allocation.objects.create(tenant=tenant, name="train", instance_type=node.node_type, node_count=1,
                                           fabric_domain=node.fabric_domain, state="active")
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
    assert incident.state == IncidentState.STABILISED and incident.signals == ["xid_79"]
    impact = IncidentImpact.objects.get()
    assert (impact.allocation_id, impact.tenant_id, impact.gpus) == (allocation.pk, allocation.tenant_id, 8)
    assert any("replacement" in e.detail for e in incident.events.all())
    run_health_sweep()  # idempotent: no second incident, no second impact
    assert Incident.objects.count() == 1 and IncidentImpact.objects.count() == 1


@pytest.mark.skipif(not HAS_REPLACE, reason="tenants.services.allocations.replace_node is not on this branch")
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


@pytest.mark.skipif(not (HAS_REPLACE and HAS_CREDITS), reason="needs tenancy replace_node and billing credits")
def test_sla_credit_recorded_when_node_returns(allocated, agent_for):
    allocation, node = allocated
    agent = agent_for(node)
    agent.heartbeat(faults={6: {"xid_errors": [79]}})
    run_health_sweep()
    NodeAgentAction.objects.filter(node=node, action=AgentAction.REBOOT).update(state=AgentActionState.SUCCEEDED)
    run_health_sweep()
    agent.report(dcgm_r3="pass", nccl_allreduce="pass", ib_link="pass")
    run_health_sweep()
    node.refresh_from_db()
    assert node.lifecycle == Lifecycle.AVAILABLE
    assert IncidentImpact.objects.get().credited


def test_failed_replacement_never_undoes_the_pull(allocated, agent_for, monkeypatch):
    import sys
    import types

    def replace_node(**kwargs):
        raise RuntimeError("no same-fabric capacity")

    fake = types.ModuleType("tenants.services.allocations")
    fake.replace_node = replace_node
    monkeypatch.setitem(sys.modules, "tenants.services.allocations", fake)
    allocation, node = allocated
    agent_for(node).heartbeat(faults={6: {"xid_errors": [79]}})
    run_health_sweep()
    node.refresh_from_db()
    assert node.lifecycle == Lifecycle.DRAINING and node.cordoned
    assert any("no same-fabric capacity" in e.detail for e in Incident.objects.get().events.all())
