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
def test_node_pulled_from_a_tenant_is_wiped_before_reuse_and_the_credit_waits_for_confirmation(allocated, agent_for):
    """The fault came only from the node's own agent while the tenant had root on it: the
    incident opens and the node is pulled, replaced, validated and wiped as for any fault, but
    the SLA credit is held until an operator (or out-of-band evidence) confirms it."""
    from billing.models import Adjustment
    from fleet.services.reconcile import reconcile_pass
    from health.services.incidents import update_postmortem
    from tenants.services.allocation_loop import run_allocation_loop

    from ..fleet.software_helpers import report_stack

    allocation, node = allocated
    agent = agent_for(node)
    agent.heartbeat(faults={6: {"xid_errors": [79]}})
    run_health_sweep()
    incident = Incident.objects.get()
    assert incident.attribution == "unconfirmed"
    assert "reported only by the node's own agent" in incident.events.get(step="detect").detail
    NodeAgentAction.objects.filter(node=node, action=AgentAction.REBOOT).update(state=AgentActionState.SUCCEEDED)
    run_health_sweep()
    agent.report(dcgm_r3="pass", nccl_allreduce="pass", ib_link="pass")
    run_health_sweep()
    node.refresh_from_db()
    assert node.lifecycle == Lifecycle.WIPING  # passed the gate, but the tenant's data is still on it
    impact = IncidentImpact.objects.get()
    assert impact.end is not None and not impact.credited  # the window is closed and kept ...
    assert not Adjustment.objects.filter(kind="sla_credit").exists()  # ... and not credited
    wipe = NodeAgentAction.objects.get(node=node, action=AgentAction.WIPE, state=AgentActionState.PENDING)
    wipe.state = AgentActionState.SUCCEEDED
    wipe.save()
    report_stack(node)  # the wiped node's new identity reports its stack
    reconcile_pass()
    run_allocation_loop()
    node.refresh_from_db()
    assert node.lifecycle == Lifecycle.AVAILABLE
    assert AllocationNode.objects.get(node=node).wiped_at is not None  # placeable again
    # an operator who checked the BMC's event log confirms it: the held window is credited now
    update_postmortem(incident=incident, actor="user:op", cause="GPU fell off the bus", attribution="provider")
    incident.refresh_from_db()
    assert incident.attribution == "provider"
    assert IncidentImpact.objects.get().credited
    credit = Adjustment.objects.get(kind="sla_credit")
    assert credit.tenant_id == allocation.tenant_id and credit.amount < 0
    assert credit.end == impact.end


@pytest.mark.django_db(databases=["default", "ledger"])
def test_a_heartbeat_with_no_gpus_from_a_tenants_node_credits_nobody(allocated, agent_for):
    """The attack: the tenant's root sends `{"gpus": []}` from its own node to earn a credit."""
    from billing.models import Adjustment
    from health.services.incidents import settle_credits

    allocation, node = allocated
    agent_for(node).heartbeat(body={"observed_at": timezone.now().isoformat().replace("+00:00", "Z"), "gpus": []})
    run_health_sweep()
    incident = Incident.objects.get()
    assert incident.attribution == "unconfirmed"
    settle_credits(node_ids=[node.pk], end=timezone.now(), actor="test")
    assert not Adjustment.objects.filter(kind="sla_credit").exists()


@pytest.mark.django_db(databases=["default", "ledger"])
def test_dcgm_failing_on_the_wiped_node_confirms_the_incident(allocated, agent_for):
    """Out-of-band evidence: once the wipe rotated the tenant's identity away, a failed DCGM from
    the node's new identity is not the tenant's word; it confirms and the held window is credited."""
    from datetime import timedelta

    from rest_framework.test import APIClient

    from billing.models import Adjustment
    from core.api.agent_tokens import mint_agent_token
    from health.services.incidents import settle_credits

    allocation, node = allocated
    agent_for(node).heartbeat(faults={6: {"xid_errors": [79]}})
    run_health_sweep()
    incident = Incident.objects.get()
    settle_credits(node_ids=[node.pk], end=timezone.now(), actor="test")  # the node came back; window closed
    stamp = timezone.now().isoformat().replace("+00:00", "Z")
    body = {"observed_at": stamp, "checks": [{"name": "dcgm_r3", "status": "fail", "detail": "PCIe replay"}]}
    tenant_era = APIClient()
    tenant_era.credentials(
        HTTP_AUTHORIZATION=f"Bearer {mint_agent_token(node.pk, issued_at=incident.opened_at - timedelta(hours=1))}"
    )
    assert tenant_era.post("/api/agent/v1/health-reports", body, format="json").status_code == 202
    incident.refresh_from_db()
    assert incident.attribution == "unconfirmed"  # the tenant-era identity's word confirms nothing
    after_wipe = APIClient()
    after_wipe.credentials(HTTP_AUTHORIZATION=f"Bearer {mint_agent_token(node.pk, issued_at=timezone.now())}")
    assert after_wipe.post("/api/agent/v1/health-reports", body, format="json").status_code == 202
    incident.refresh_from_db()
    assert incident.attribution == "provider"
    assert "dcgm_r3 failed" in incident.events.get(step="diagnose", detail__startswith="attribution").detail
    assert Adjustment.objects.filter(kind="sla_credit", tenant_id=allocation.tenant_id).exists()


@pytest.mark.django_db(databases=["default", "ledger"])
def test_a_node_the_control_plane_lost_is_the_providers_fault_as_before(allocated, agent_for):
    from datetime import timedelta

    from fleet.models import Node

    allocation, node = allocated
    Node.objects.filter(pk=node.pk).update(last_heartbeat_at=timezone.now() - timedelta(minutes=10))
    run_health_sweep(now=timezone.now())
    incident = Incident.objects.filter(nodes=node).first()
    assert incident is not None and incident.attribution == "provider"


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
