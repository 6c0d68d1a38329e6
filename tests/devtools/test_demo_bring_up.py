"""The demo's newly enrolled node lacks its IB stack and is held at the network step with why."""

import io
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from devtools.demo import DEMO_NEW_NODE, DEMO_PROCESSES
from devtools.services.demo_bring_up import seed_demo_bring_up
from devtools.simulator import FleetSimulator
from fleet.models import Node, NodeEvent
from fleet.services.bring_up import MAX_ATTEMPTS, advance_bring_up

pytestmark = pytest.mark.django_db


def test_the_new_node_is_held_at_the_network_step_with_its_reason(small_fleet):
    out = io.StringIO()
    seed_demo_bring_up(out)
    node = Node.objects.get(hostname=DEMO_NEW_NODE)
    assert node.lifecycle == "bringing_up" and node.bring_up.step == "network_stack"
    passed = set(NodeEvent.objects.filter(node=node, action__startswith="bring_up.").values_list("action", flat=True))
    assert {"bring_up.firmware", "bring_up.os_kernel", "bring_up.driver"} <= passed
    failed = NodeEvent.objects.get(node=node, action="bring_up.network_stack")
    assert failed.reason.startswith("check failed (1 of 3)") and "not installed" in failed.reason
    now = timezone.now()
    for attempt in range(1, MAX_ATTEMPTS):
        advance_bring_up(now=now + timedelta(minutes=10 * attempt))
    node.refresh_from_db()
    assert node.lifecycle == "bring_up_failed" and node.last_error.startswith("bring-up failed at network_stack")
    seed_demo_bring_up(out)  # idempotent
    assert "already enrolled" in out.getvalue() and Node.objects.filter(hostname=DEMO_NEW_NODE).count() == 1


def test_the_demo_simulator_leaves_the_layer_out_of_that_nodes_stack(small_fleet):
    seed_demo_bring_up(io.StringIO())
    argv = dict(DEMO_PROCESSES)["fleet simulator"]
    assert argv[argv.index("--missing-software") + 1] == f"{DEMO_NEW_NODE}:ib_stack"
    simulator = FleetSimulator(
        url="http://127.0.0.1:9", hostnames=[DEMO_NEW_NODE], missing_software={DEMO_NEW_NODE: {"ib_stack"}}, workers=1
    )
    try:
        assert simulator.refresh(timezone.now()) == 1
        stack = {c["component"]: c["state"] for c in simulator.agents[DEMO_NEW_NODE].software()}
    finally:
        simulator.close()
    assert stack["ib_stack"] == "missing" and stack["gpu_driver"] == "ok"


def test_a_malformed_missing_software_option_says_how_to_write_it():
    with pytest.raises(CommandError, match="HOST:LAYER"):
        call_command("simulate_fleet", "--missing-software", "dc1-gpu00257")
