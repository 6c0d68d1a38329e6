"""A 6-minute control-plane outage, simulated by moving the server's server_clock, with every control
loop running before and after it and the agents heartbeating: no node is quarantined, and a node
whose validation was almost out of time when the control plane went away is judged on the checks
it really ran, not failed to triage for the minutes nobody could act in."""

from datetime import timedelta

import pytest

from core.models import AuditEvent
from fleet.choices import AgentAction, Lifecycle
from fleet.models import Node, NodeAgentAction
from fleet.services.agent_work import request_agent_action
from fleet.services.reconcile import reconcile_nodes
from health.choices import IncidentScope
from health.models import Incident
from health.services.sweep import run_health_sweep
from tenants.services.allocation_loop import run_allocation_loop
from tests.fleet.lifecycle_helpers import place

pytestmark = pytest.mark.django_db


def _loops():
    reconcile_nodes()
    run_allocation_loop()
    run_health_sweep()


def _run(agents, server_clock, seconds, *, step=10, loops_every=30):
    for tick in range(step, seconds + 1, step):
        server_clock.advance(step)
        for agent in agents:
            assert agent.heartbeat().status_code == 202
        if tick % loops_every == 0:
            _loops()


def test_a_six_minute_outage_fails_no_validation_and_quarantines_nothing(nodes, agent_for, server_clock):
    agents = [agent_for(n) for n in nodes]
    checking = place(nodes[0], Lifecycle.VALIDATING, entered_ago=timedelta(minutes=57))
    request = request_agent_action(node=checking, action=AgentAction.DCGM_R3, actor="test")
    NodeAgentAction.objects.filter(pk=request.pk).update(created_at=checking.state_entered_at + timedelta(seconds=5))
    _run(agents, server_clock, 60)
    # The control plane goes away for 6 minutes: no loop runs, no heartbeat is received.
    server_clock.advance(360)
    _loops()
    assert Node.objects.get(pk=checking.pk).lifecycle == Lifecycle.VALIDATING  # 63 min, 57 of them counted
    assert AuditEvent.objects.filter(action="node.state_deadlines_rearmed").exists()
    # The agents are back; the checks the node was asked for finish and pass.
    _run(agents, server_clock, 60)
    assert agents[0].report(dcgm_r3="pass", nccl_allreduce="pass", ib_link="pass").status_code == 202
    _run(agents, server_clock, 300)
    assert Node.objects.get(pk=checking.pk).lifecycle == Lifecycle.AVAILABLE
    assert set(Node.objects.values_list("lifecycle", flat=True)) == {Lifecycle.AVAILABLE}  # nothing quarantined
    assert not NodeAgentAction.objects.filter(action__in=(AgentAction.REBOOT, AgentAction.GPU_RESET)).exists()
    assert Incident.objects.filter(scope=IncidentScope.CONTROL_PLANE).count() == 1
    assert not Incident.objects.filter(scope=IncidentScope.NODE).exists()


def test_a_validation_that_overruns_with_the_loops_running_still_goes_to_triage(nodes, agent_for, server_clock):
    agents = [agent_for(n) for n in nodes]
    checking = place(nodes[0], Lifecycle.VALIDATING, entered_ago=timedelta(minutes=57))
    _run(agents, server_clock, 60)
    server_clock.advance(360)
    _loops()
    _run(agents, server_clock, 90)  # 57 + 1 + 1.5 minutes with the loops running: still inside the hour
    assert Node.objects.get(pk=checking.pk).lifecycle == Lifecycle.VALIDATING
    _run(agents, server_clock, 60)
    node = Node.objects.get(pk=checking.pk)
    assert node.lifecycle == Lifecycle.TRIAGE and "validating did not finish within 1 h" in node.last_error
