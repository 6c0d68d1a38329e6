"""Operator actions: table-driven allowed/forbidden from every state, and what each one does."""

import pytest

from core.models import AuditEvent
from fleet.choices import AgentActionState, Lifecycle
from fleet.models import Node, NodeAgentAction, NodeEvent
from fleet.selectors import nodes_to_drain
from fleet.services.lifecycle import InvalidTransition
from fleet.services.operator_actions import (
    REGISTRY,
    available_actions,
    perform_operator_action,
)

from .lifecycle_helpers import allocate, pass_drive_gate, place

pytestmark = pytest.mark.django_db

# action → (states it is allowed from, where it leaves the node). None: lifecycle unchanged.
EXPECTED = {
    "start_bring_up": ({"enrolled", "bring_up_failed"}, "bringing_up"),
    "start_burn_in": ({"enrolled", "repair", "rma"}, "burn_in"),
    "validate": ({"available", "remediating", "triage"}, "validating"),
    "remediate": ({"draining"}, "remediating"),
    "triage": (
        {
            "bring_up_failed",
            "burn_in_failed",
            "provision_failed",
            "wipe_failed",
            "quarantined",
            "draining",
            "remediating",
            "validating",
        },
        "triage",
    ),
    "repair": ({"triage"}, "repair"),
    "rma": ({"triage"}, "rma"),
    "decommission": ({"enrolled", "bring_up_failed", "available", "triage", "rma"}, "decommissioning"),
    "drain": ({"available", "provisioning", "active", "quarantined"}, None),
    "cordon": (set(Lifecycle.values) - {"retired", "disposed"}, None),
}
CASES = [(action, state, state in allowed) for action, (allowed, _) in EXPECTED.items() for state in Lifecycle.values]


@pytest.fixture
def node(small_fleet):
    return Node.objects.order_by("hostname").first()


@pytest.mark.parametrize(("action", "state", "allowed"), CASES)
def test_action_allowed_exactly_from_its_states(node, action, state, allowed):
    place(node, state)
    if not allowed:
        with pytest.raises(InvalidTransition) as err:
            perform_operator_action(node_id=node.pk, action=action, actor="user:op", reason="test")
        assert action in err.value.detail and state in err.value.detail
        assert Node.objects.get(pk=node.pk).lifecycle == state
        assert not NodeEvent.objects.filter(node=node, action=action).exists()
        return
    if action == "rma":
        pass_drive_gate(node)  # the drive gate (tested in test_exit_gate.py) is met
    perform_operator_action(node_id=node.pk, action=action, actor="user:op", reason="test")
    node.refresh_from_db()
    to_state = EXPECTED[action][1]
    if action == "drain" and state == "quarantined":
        to_state = "draining"
    assert node.lifecycle == (to_state or state)
    event = NodeEvent.objects.filter(node=node, action=action).latest("at")
    assert (event.actor, event.reason) == ("user:op", "test")
    assert AuditEvent.objects.filter(action=f"node.{action}", object_id=str(node.pk)).exists()


def test_available_actions_match_the_registry_rules(node):
    place(node, "triage")
    names = {a.name for a in available_actions(node)}
    assert names == {"cordon", "validate", "repair", "rma", "decommission"} | (
        {n for n in REGISTRY if n not in EXPECTED and n != "uncordon" and REGISTRY[n].is_allowed(node)}
    )


def test_burn_in_and_validate_queue_agent_work(node):
    place(node, "enrolled")
    perform_operator_action(node_id=node.pk, action="start_burn_in", actor="user:op")
    assert NodeAgentAction.objects.get(node=node).action == "burn_in"
    place(node, "available")
    perform_operator_action(node_id=node.pk, action="validate", actor="user:op")
    assert set(
        NodeAgentAction.objects.filter(node=node, state=AgentActionState.PENDING).values_list("action", flat=True)
    ) == {"burn_in", "dcgm_r3"}


def test_cordon_uncordon_flags_and_refusals(node):
    perform_operator_action(node_id=node.pk, action="cordon", actor="user:op", reason="fan noise")
    node.refresh_from_db()
    assert (node.cordoned, node.cordon_reason, node.attribution) == (True, "fan noise", "provider")
    with pytest.raises(InvalidTransition, match="already cordoned"):
        perform_operator_action(node_id=node.pk, action="cordon", actor="user:op")
    perform_operator_action(node_id=node.pk, action="uncordon", actor="user:op", reason="fixed")
    node.refresh_from_db()
    assert (node.cordoned, node.cordon_reason, node.attribution) == (False, "", "")
    with pytest.raises(InvalidTransition, match="not cordoned"):
        perform_operator_action(node_id=node.pk, action="uncordon", actor="user:op")


def test_drain_of_an_idle_node_completes_at_once(node):
    perform_operator_action(node_id=node.pk, action="drain", actor="user:op", reason="maintenance")
    node.refresh_from_db()
    assert (node.lifecycle, node.cordoned, node.drain_requested_at) == ("available", True, None)
    assert not nodes_to_drain().exists()


def test_drain_of_an_allocated_node_asks_the_allocation_to_move(node):
    place(node, "active")
    allocate(node)
    perform_operator_action(node_id=node.pk, action="drain", actor="user:op", reason="maintenance")
    node.refresh_from_db()
    assert node.lifecycle == "active" and node.cordoned
    assert node.drain_deadline > node.drain_requested_at
    assert list(nodes_to_drain()) == [node]
    perform_operator_action(node_id=node.pk, action="uncordon", actor="user:op")
    assert not nodes_to_drain().exists()


def test_unknown_action_is_a_key_error(node):
    with pytest.raises(KeyError):
        perform_operator_action(node_id=node.pk, action="explode", actor="user:op")
