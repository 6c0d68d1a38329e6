"""An operator drains a node a tenant is using: the tenant moves to a replacement, the drained
node is stopped and wiped by the real loops, and it stays cordoned."""

import pytest

from fleet.choices import AgentAction, AgentActionState, Lifecycle
from fleet.models import NodeAgentAction
from fleet.services.reconcile import reconcile_pass
from tenants.models import Allocation, AllocationNode
from tenants.services.allocation_loop import run_allocation_loop

from ..fleet.software_helpers import report_stack
from .conftest import provision_succeeds

pytestmark = pytest.mark.django_db


def _agent_succeeds(action: str) -> None:
    NodeAgentAction.objects.filter(action=action, state=AgentActionState.PENDING).update(
        state=AgentActionState.SUCCEEDED
    )


def test_operator_drain_moves_the_tenant_and_wipes_the_node(small_fleet, client_a, ops_api):
    created = client_a.post(
        "/api/v1/allocations",
        {"name": "train", "instance_type": "h100-sxm-8x", "node_count": 2, "fabric": "isolated"},
        format="json",
        HTTP_IDEMPOTENCY_KEY="d1",
    )
    run_allocation_loop()
    provision_succeeds()
    run_allocation_loop()
    allocation = Allocation.objects.get(pk=created.data["id"])
    assert allocation.state == "active"
    drained = AllocationNode.objects.filter(allocation=allocation).first().node

    response = ops_api.post(
        f"/api/v1/ops/nodes/{drained.pk}/actions",
        {"action": "drain", "reason": "fan noise"},
        format="json",
        HTTP_IDEMPOTENCY_KEY="drain-1",
    )
    assert response.status_code == 202, response.content
    run_allocation_loop()

    allocation.refresh_from_db()
    drained.refresh_from_db()
    assert allocation.degraded
    live = AllocationNode.objects.filter(allocation=allocation, ended_at__isnull=True)
    assert live.count() == 2 and not live.filter(node=drained).exists()
    replacement = live.get(role="replacement").node
    assert replacement.fabric_domain_id == drained.fabric_domain_id
    assert drained.lifecycle == Lifecycle.RELEASING and drained.cordoned and drained.drain_requested_at is None
    assert NodeAgentAction.objects.filter(node=drained, action=AgentAction.STOP, state="pending").exists()

    _agent_succeeds(AgentAction.STOP)
    reconcile_pass()
    _agent_succeeds(AgentAction.WIPE)
    report_stack(drained)  # the wiped node's new identity reports its stack
    reconcile_pass()
    provision_succeeds()  # the replacement's agent confirms
    run_allocation_loop()

    drained.refresh_from_db()
    allocation.refresh_from_db()
    assert drained.lifecycle == Lifecycle.AVAILABLE and drained.cordoned  # clean, and still out of rotation
    assert AllocationNode.objects.get(node=drained).wiped_at is not None
    assert not allocation.degraded and allocation.state == "active"
