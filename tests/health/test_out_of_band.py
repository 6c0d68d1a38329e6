"""Remediation out of band: a node whose agent has gone silent is power-cycled through its BMC
(the emulated Redfish service), and it comes back only through validation."""

from datetime import timedelta

import pytest
from django.utils import timezone

from fleet.choices import AgentAction, Lifecycle, PowerActionState
from fleet.models import BMCPowerAction, Node, NodeAgentAction, NodeEvent
from fleet.services.power_sync import fail_overdue, power_sync_pass
from health.services.sweep import run_health_sweep
from tests.redfish import attach_bmc

pytestmark = pytest.mark.django_db


def refresh(node):
    node.refresh_from_db()
    return node


def test_xid_79_on_a_silent_node_is_fixed_by_a_redfish_power_cycle(nodes, agent_for, redfish_emulator, emulated_system):
    node, agent = nodes[0], agent_for(nodes[0])
    system = emulated_system()
    attach_bmc(node, redfish_emulator, system)
    agent.heartbeat(faults={0: {"xid_errors": [79]}})  # the GPU fell off the bus; then the agent says nothing more

    summary = run_health_sweep()
    node = refresh(node)
    assert node.lifecycle == Lifecycle.REMEDIATING and summary["bmc_power_cycles"] == 1
    assert not NodeAgentAction.objects.filter(node=node, action=AgentAction.REBOOT).exists()  # not asked in band
    cycle = BMCPowerAction.objects.get(node=node)
    assert cycle.action == "power_cycle" and cycle.state == PowerActionState.PENDING

    power_sync_pass(budget_s=30)  # sends it: the emulated BMC takes the node down and brings it back
    cycle.refresh_from_db()
    assert cycle.state == PowerActionState.ACCEPTED and cycle.reset_type == "ForceRestart"
    assert redfish_emulator.wait_for_power(system, "On") == "On"
    power_sync_pass(budget_s=30)
    cycle.refresh_from_db()
    assert cycle.state == PowerActionState.SUCCEEDED

    run_health_sweep()
    node = refresh(node)
    assert node.lifecycle == Lifecycle.VALIDATING  # not available: the cycle alone proves nothing
    checks = NodeAgentAction.objects.get(node=node, action=AgentAction.DCGM_R3)
    assert checks.params["checks"] == ["dcgm_r3", "nccl_allreduce", "ib_link"]
    run_health_sweep()
    assert refresh(node).lifecycle == Lifecycle.VALIDATING  # still waiting for the agent's checks

    agent.heartbeat()  # the host is back
    agent.report(dcgm_r3="pass", nccl_allreduce="pass", ib_link="pass")
    run_health_sweep()
    assert refresh(node).lifecycle == Lifecycle.AVAILABLE
    trail = set(NodeEvent.objects.filter(node=node).values_list("action", flat=True))
    assert {"power_power_cycle", "power_power_cycle_sent", "power_power_cycle_done", "health_validate"} <= trail


def test_a_power_cycle_never_seen_back_sends_the_node_to_triage_with_why(
    nodes, agent_for, redfish_emulator, emulated_system
):
    node, agent = nodes[0], agent_for(nodes[0])
    attach_bmc(node, redfish_emulator, emulated_system())
    agent.heartbeat(faults={0: {"xid_errors": [79]}})
    run_health_sweep()
    # The BMC is not asked (nothing sends it) and the deadline passes.
    assert fail_overdue(now=timezone.now() + timedelta(minutes=11)) == 1
    run_health_sweep()
    node = refresh(node)
    assert node.lifecycle == Lifecycle.TRIAGE
    assert node.last_error.startswith("BMC power cycle failed: power cycle never sent")


def test_a_node_without_a_bmc_still_gets_the_agents_reboot(nodes, agent_for):
    node, agent = nodes[0], agent_for(nodes[0])
    agent.heartbeat(faults={0: {"xid_errors": [79]}})
    run_health_sweep()
    assert NodeAgentAction.objects.filter(node=node, action=AgentAction.REBOOT).exists()
    assert not BMCPowerAction.objects.exists()
    assert Node.objects.get(pk=node.pk).lifecycle == Lifecycle.REMEDIATING


def test_a_hung_node_is_recovered_through_its_bmc(nodes, agent_for, redfish_emulator, emulated_system):
    """No XID at all: the host simply stops answering (kernel wedged). The lease expires, and
    the only way to act on it is out of band."""
    node, agent = nodes[0], agent_for(nodes[0])
    system = emulated_system()
    attach_bmc(node, redfish_emulator, system)
    agent.heartbeat()
    start = timezone.now()
    for seconds in range(10, 300, 30):  # the sweep keeps running while the node is silent
        run_health_sweep(now=start + timedelta(seconds=seconds))
    run_health_sweep(now=start + timedelta(seconds=301))
    node = refresh(node)
    assert node.lifecycle == Lifecycle.REMEDIATING
    assert BMCPowerAction.objects.get(node=node).action == "power_cycle"
    power_sync_pass(budget_s=30)
    assert redfish_emulator.wait_for_power(system, "On") == "On"
    power_sync_pass(budget_s=30)
    run_health_sweep(now=start + timedelta(seconds=331))
    assert refresh(node).lifecycle == Lifecycle.VALIDATING
