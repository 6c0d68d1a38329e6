"""State deadlines count only time the reconciler was running: an outage of the control plane
(database, broker, beat or worker away) longer than a state's timeout fails no node, while a
node that overruns its deadline with the loop running is still failed.

The server's server_clock is moved (every `timezone.now()` in the process), not waited for."""

from datetime import timedelta

import pytest

from core.models import AuditEvent
from fleet.models import Node
from fleet.services.lifecycle import STATE_TIMEOUTS
from fleet.services.reconcile import reconcile_nodes

from .lifecycle_helpers import place

pytestmark = pytest.mark.django_db


@pytest.fixture
def node(small_fleet):
    return Node.objects.order_by("hostname").first()


def _run_loop_for(server_clock, duration: timedelta, every=timedelta(seconds=30)):
    """The reconciler running normally for `duration` (a pass every 30 s, as beat would)."""
    end = server_clock.now() + duration
    while server_clock.now() < end:
        server_clock.advance(every)
        reconcile_nodes()


@pytest.mark.parametrize(
    ("state", "failure"),
    [("provisioning", "provision_failed"), ("validating", "triage"), ("burn_in", "burn_in_failed")],
)
def test_an_outage_longer_than_the_state_timeout_fails_no_node(node, server_clock, state, failure):
    place(node, state, entered_ago=timedelta(minutes=1))
    entered, deadline = node.state_entered_at, node.state_deadline
    reconcile_nodes()  # the loop was running before the outage
    outage = STATE_TIMEOUTS[state] + timedelta(minutes=5)
    server_clock.advance(outage)
    result = reconcile_nodes()
    node.refresh_from_db()
    assert node.lifecycle == state, node.last_error
    assert result.rearmed == 1
    assert node.state_deadline == deadline + outage
    assert node.state_entered_at == entered  # what the agent did during the visit still counts
    event = AuditEvent.objects.get(action="node.state_deadlines_rearmed")
    assert event.after == {"nodes": 1, "gap_seconds": int(outage.total_seconds())}


def test_a_real_overrun_after_the_outage_still_fails_the_node(node, server_clock):
    place(node, "provisioning", entered_ago=timedelta(minutes=5))  # 10 min of its 15 left
    reconcile_nodes()
    server_clock.advance(timedelta(minutes=20))  # outage: nothing counts
    reconcile_nodes()
    _run_loop_for(server_clock, timedelta(minutes=9, seconds=30))
    node.refresh_from_db()
    assert node.lifecycle == "provisioning"
    _run_loop_for(server_clock, timedelta(minutes=1))  # the 10 minutes left are used up with the loop running
    node.refresh_from_db()
    assert node.lifecycle == "provision_failed"
    assert "not confirmed by the agent within 15 min" in node.last_error


def test_scheduling_jitter_is_not_an_outage(node, server_clock):
    """Passes 50 s apart (beat late, a slow worker) re-arm nothing: the deadline is real time."""
    place(node, "releasing", entered_ago=timedelta(minutes=9))
    reconcile_nodes()
    _run_loop_for(server_clock, timedelta(minutes=2), every=timedelta(seconds=50))
    node.refresh_from_db()
    assert node.lifecycle == "wipe_failed"
    assert not AuditEvent.objects.filter(action="node.state_deadlines_rearmed").exists()


def test_a_node_that_entered_its_state_during_the_outage_gets_back_only_its_part(node, server_clock, small_fleet):
    late, last = Node.objects.order_by("hostname")[1:3]
    place(node, "provisioning", entered_ago=timedelta(minutes=1))
    reconcile_nodes()
    server_clock.advance(timedelta(minutes=20))
    place(late, "provisioning")  # an operator's move while the loops were away
    server_clock.advance(timedelta(minutes=10))
    place(last, "provisioning")  # just before they resumed
    deadlines = {n.pk: n.state_deadline for n in (node, late, last)}
    assert reconcile_nodes().rearmed == 3
    after = dict(Node.objects.filter(pk__in=deadlines).values_list("pk", "state_deadline"))
    assert after[node.pk] == deadlines[node.pk] + timedelta(minutes=30)
    assert after[late.pk] == deadlines[late.pk] + timedelta(minutes=10)
    assert after[last.pk] == deadlines[last.pk]
