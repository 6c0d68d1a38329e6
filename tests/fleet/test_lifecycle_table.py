"""The lifecycle table: every allowed move works and writes an event; every forbidden one raises."""

import pytest

from fleet.choices import Lifecycle
from fleet.models import Node, NodeEvent
from fleet.services.drive_gate import EXIT_OF_STATE
from fleet.services.lifecycle import (
    DEADLINE_FAILURE,
    STATE_TIMEOUTS,
    TRANSITIONS,
    InvalidTransition,
    transition,
    transition_many,
)

from .lifecycle_helpers import pass_drive_gate

pytestmark = pytest.mark.django_db

ALLOWED = [(src, dst) for src, dsts in TRANSITIONS.items() for dst in sorted(dsts)]
FORBIDDEN = [(src, dst) for src in Lifecycle.values for dst in Lifecycle.values if dst not in TRANSITIONS[src]]


def _node_in(state: str) -> Node:
    node = Node.objects.order_by("hostname").first()
    Node.objects.filter(pk=node.pk).update(lifecycle=state)  # test setup only: place the node in a state
    node.refresh_from_db()
    return node


def test_every_state_has_a_row():
    assert set(TRANSITIONS) == set(Lifecycle.values)
    assert not TRANSITIONS[Lifecycle.DISPOSED]


@pytest.mark.parametrize(("src", "dst"), ALLOWED)
def test_allowed_transition_moves_and_records_an_event(small_fleet, src, dst):
    node = _node_in(src)
    if dst in EXIT_OF_STATE:
        pass_drive_gate(node)  # exits out of custody need the drive gate (tests/fleet/test_exit_gate.py)
    transition(node, dst, actor="user:test", action="test", reason="table")
    node.refresh_from_db()
    assert node.lifecycle == dst
    event = NodeEvent.objects.filter(node=node, action="test").get()
    assert (event.from_state, event.to_state, event.actor, event.reason) == (src, dst, "user:test", "table")
    assert (node.state_deadline is not None) == (dst in STATE_TIMEOUTS)


@pytest.mark.parametrize(("src", "dst"), FORBIDDEN)
def test_forbidden_transition_raises_and_changes_nothing(small_fleet, src, dst):
    node = _node_in(src)
    with pytest.raises(InvalidTransition) as err:
        transition(node, dst, actor="user:test", action="test")
    assert err.value.allowed == sorted(TRANSITIONS[src])
    node.refresh_from_db()
    assert node.lifecycle == src
    assert not NodeEvent.objects.filter(node=node, action="test").exists()


def test_a_stale_copy_cannot_move_a_node_that_moved(small_fleet):
    node = _node_in(Lifecycle.AVAILABLE)
    stale = Node.objects.get(pk=node.pk)
    transition(node, Lifecycle.PROVISIONING, actor="a", action="place")
    with pytest.raises(InvalidTransition, match="changed state concurrently"):
        transition(stale, Lifecycle.QUARANTINED, actor="b", action="quarantine")
    assert Node.objects.get(pk=node.pk).lifecycle == Lifecycle.PROVISIONING


def test_deadline_failures_are_all_legal_moves():
    for src, dst in DEADLINE_FAILURE.items():
        assert dst in TRANSITIONS[src]
        assert src in STATE_TIMEOUTS


def test_transition_many_moves_only_nodes_allowed_to_move(small_fleet, django_assert_max_num_queries):
    nodes = list(Node.objects.order_by("hostname")[:6])
    Node.objects.filter(pk__in=[n.pk for n in nodes[:2]]).update(lifecycle=Lifecycle.ACTIVE)
    nodes = list(Node.objects.filter(pk__in=[n.pk for n in nodes]))
    with django_assert_max_num_queries(8):
        changes = transition_many(nodes, Lifecycle.QUARANTINED, actor="system:health", action="quarantine")
    assert len(changes) == 6
    assert {c.from_state for c in changes} == {Lifecycle.ACTIVE, Lifecycle.AVAILABLE}
    assert NodeEvent.objects.filter(action="quarantine").count() == 6
    again = transition_many(nodes, Lifecycle.QUARANTINED, actor="system:health", action="quarantine")
    assert again == []  # quarantined → quarantined is not a move: nothing new happens
