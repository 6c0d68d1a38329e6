"""Long outages of the control plane, simulated by moving the server's server_clock (every
`timezone.now()` in the process) rather than waiting, with the loops that judge allocation and
node deadlines (reconciler, allocation loop) running as beat would run them before and after:
nothing accepted meanwhile is failed, and nothing that was under way is failed for the time no
loop ran. (The health sweep's side, with heartbeating agents, is tests/health/test_outage_deadlines.py.)"""

from datetime import timedelta

import pytest

from core.models import AuditEvent
from fleet.choices import AgentAction, AgentActionState, Lifecycle
from fleet.models import Node, NodeAgentAction
from fleet.services.agent_results import record_action_result
from fleet.services.reconcile import reconcile_nodes
from tenants.models import Allocation
from tenants.services.allocation_loop import run_allocation_loop
from tests.tenants.conftest import ready_output

pytestmark = pytest.mark.django_db


def _loops():
    """One pass of the deadline-judging loops in `run_loops --once` order."""
    reconcile_nodes()
    run_allocation_loop()


def _run(server_clock, duration: timedelta, every=timedelta(seconds=30)):
    end = server_clock.now() + duration
    while server_clock.now() < end:
        server_clock.advance(every)
        _loops()


def _create(client, key):
    body = {"name": "train", "instance_type": "h100-sxm-8x", "node_count": 1, "fabric": "isolated"}
    response = client.post("/api/v1/allocations", body, format="json", HTTP_IDEMPOTENCY_KEY=key)
    assert response.status_code == 202, response.content
    return response.data["id"]


def _provision_succeeds(allocation_id):
    """The node agents report their provision done (the reconciler moves the nodes on)."""
    for action in NodeAgentAction.objects.filter(
        action=AgentAction.PROVISION,
        state=AgentActionState.PENDING,
        node__allocation_memberships__allocation=allocation_id,
    ):
        record_action_result(
            node_id=action.node_id,
            action_id=action.pk,
            action=action.action,
            status="succeeded",
            output=ready_output(action.params),
        )


def test_an_11_minute_broker_outage_fails_nothing_accepted_or_under_way(small_fleet, client_a, server_clock):
    _loops()
    under_way = _create(client_a, "before")
    _loops()
    assert Allocation.objects.get(pk=under_way).state == "provisioning"
    _run(server_clock, timedelta(minutes=5))  # its nodes provision slowly: 5 of their 15 minutes used
    # The broker goes away for 11 minutes: the API keeps accepting creates, no loop runs.
    server_clock.advance(timedelta(minutes=4))
    accepted = [_create(client_a, f"during-{i}") for i in range(3)]
    server_clock.advance(timedelta(minutes=7))
    _loops()
    states = dict(Allocation.objects.values_list("id", "state"))
    assert {str(k): v for k, v in states.items()} == {
        under_way: "provisioning",
        **dict.fromkeys(accepted, "provisioning"),
    }
    assert not Node.objects.filter(lifecycle=Lifecycle.PROVISION_FAILED).exists()
    assert AuditEvent.objects.filter(action="node.state_deadlines_rearmed").exists()
    assert AuditEvent.objects.filter(action="allocation.deadlines_rearmed").exists()
    # The agents finish; every allocation goes active.
    for allocation in [under_way, *accepted]:
        _provision_succeeds(allocation)
    _run(server_clock, timedelta(minutes=1))
    assert set(Allocation.objects.values_list("state", flat=True)) == {"active"}
    assert not Allocation.objects.filter(state="failed").exists()


def test_a_provisioning_node_that_overruns_with_the_loops_running_is_still_failed(small_fleet, client_a, server_clock):
    _loops()
    allocation = _create(client_a, "slow")
    _loops()
    server_clock.advance(timedelta(minutes=11))  # an outage: not counted
    _loops()
    _run(server_clock, timedelta(minutes=14))
    assert not Node.objects.filter(lifecycle=Lifecycle.PROVISION_FAILED).exists()
    _run(server_clock, timedelta(minutes=2))  # 15 minutes of running loops and no agent confirmation
    assert Node.objects.filter(lifecycle=Lifecycle.PROVISION_FAILED).count() == 1
    _run(server_clock, timedelta(minutes=5))  # the allocation's own 20 minutes, also counted with the loops running
    assert Allocation.objects.get(pk=allocation).state == "failed"
