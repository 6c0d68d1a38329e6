"""The fleet simulator drives real agents over real HTTP against a live server: heartbeats
land, desired work gets done, and a scripted fault reaches the health loop."""

from datetime import UTC, datetime, timedelta

import pytest

from devtools.simulator import FleetSimulator
from fleet.choices import AgentActionState, Lifecycle
from fleet.models import Node, NodeAgentAction
from fleet.services.agent_work import request_agent_action
from fleet.services.lifecycle import transition

pytestmark = pytest.mark.django_db(transaction=True)


def _run(simulator: FleetSimulator, start: datetime, seconds: int, step: int = 5) -> datetime:
    now = start
    for _ in range(seconds // step):
        simulator.step(now)
        now += timedelta(seconds=step)
    return now


def test_simulated_agents_heartbeat_and_do_the_work_they_are_asked(live_server):
    from devtools.services.fleet_seed import seed_fleet

    seed_fleet(gpus=32)
    nodes = list(Node.objects.order_by("hostname"))
    simulator = FleetSimulator(url=live_server.url, speed=60.0, seed=3)
    start = datetime.now(UTC)
    assert simulator.refresh(start) == 4

    # one node is released by its tenant: the control plane asks for a wipe
    wiping = nodes[0]
    transition(wiping, Lifecycle.PROVISIONING, actor="test", action="place")
    transition(wiping, Lifecycle.ACTIVE, actor="test", action="provisioned")
    transition(wiping, Lifecycle.RELEASING, actor="test", action="cancel")
    transition(wiping, Lifecycle.WIPING, actor="test", action="stopped")
    wipe = request_agent_action(node=wiping, action="wipe", actor="test")

    _run(simulator, start, seconds=120)

    assert Node.objects.filter(last_heartbeat_at__isnull=False).count() == 4
    wipe.refresh_from_db()
    assert wipe.state == AgentActionState.SUCCEEDED


def test_a_scripted_xid_79_is_seen_by_the_health_loop(live_server):
    from devtools.services.fleet_seed import seed_fleet
    from health.services.sweep import run_health_sweep

    seed_fleet(gpus=16)
    victim = Node.objects.order_by("hostname").first()
    simulator = FleetSimulator(
        url=live_server.url, speed=1.0, seed=5, scenarios={victim.hostname: "xid 79 on gpu 3 at 20s"}
    )
    start = datetime.now(UTC)
    simulator.refresh(start)
    end = _run(simulator, start, seconds=60)
    run_health_sweep(now=end)
    victim.refresh_from_db()
    assert victim.lifecycle in (Lifecycle.QUARANTINED, Lifecycle.DRAINING, Lifecycle.REMEDIATING)
    assert (
        NodeAgentAction.objects.filter(node=victim, action__in=["reboot", "gpu_reset"]).exists()
        or victim.lifecycle != Lifecycle.REMEDIATING
    )


def test_simulated_agents_sanitise_every_drive_and_the_node_can_then_retire(live_server):
    from devtools.services.fleet_seed import seed_fleet
    from fleet.models import SanitizationRecord
    from fleet.services.operator_actions import perform_operator_action
    from fleet.services.sanitization import record_bmc_reset

    seed_fleet(gpus=16)
    node = Node.objects.order_by("hostname").first()
    perform_operator_action(node_id=node.pk, action="decommission", actor="user:test", reason="end of life")
    simulator = FleetSimulator(url=live_server.url, speed=120.0, seed=9, hostnames=[node.hostname])
    start = datetime.now(UTC)
    simulator.refresh(start)
    # the agent reports the drives it sees first: the exit gate and the sanitise methods follow it
    now = _run(simulator, start, seconds=120)
    perform_operator_action(node_id=node.pk, action="sanitize", actor="user:test", reason="before resale")
    _run(simulator, now, seconds=600)

    records = SanitizationRecord.objects.filter(drive__node=node)
    drives = node.drives.filter(missing_since__isnull=True)  # what the agent still reports
    assert records.count() == drives.count() == 10
    assert all(r.verified and r.source == "agent" for r in records)
    # the node leaves the organisation (no disposition plan keeps it inside): purge, never clear
    assert {r.method for r in records} <= {"purge", "destroy"}
    record_bmc_reset(node=node, actor="user:test")
    retired = perform_operator_action(node_id=node.pk, action="retire", actor="user:test", reason="sanitised")
    assert retired.lifecycle == Lifecycle.RETIRED
