"""The reconciler: advances from agent results, retries with backoff, enforces deadlines,
queues missing work, survives a crash midway, and never acts on one node twice."""

import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from fleet.choices import RECONCILED_LIFECYCLES, AgentActionState
from fleet.models import Node, NodeAgentAction, NodeEvent
from fleet.services.agent_results import record_action_result
from fleet.services.agent_work import request_agent_action
from fleet.services.reconcile import WORKING_STATES, backoff, reconcile_nodes, reconcile_pass

from .lifecycle_helpers import allocate, place
from .software_helpers import report_stack

pytestmark = pytest.mark.django_db


@pytest.fixture
def nodes(small_fleet):
    return list(Node.objects.order_by("hostname"))


def _finish(node, action, status="succeeded", detail="", at=None):
    row = request_agent_action(node=node, action=action, actor="test")
    record_action_result(node_id=node.pk, action_id=row.pk, action=action, status=status, detail=detail, finished_at=at)
    return row


def _wiped(node):
    """The wipe done and the node's (new) identity reporting its stack afterwards: what a wiped
    node needs before the reconciler returns it to the pool (fleet.services.wipe_exit)."""
    _finish(node, "wipe")
    report_stack(node)


def _state(node):
    node.refresh_from_db()
    return node.lifecycle


@pytest.mark.parametrize(
    ("state", "action", "to_state"),
    [
        ("burn_in", "burn_in", "available"),
        ("provisioning", "provision", "active"),
        ("releasing", "stop", "wiping"),
        ("wiping", "wipe", "available"),
    ],
)
def test_advances_when_the_agent_confirms(nodes, state, action, to_state):
    node = place(nodes[0], state)
    _finish(node, action)
    if state == "wiping":
        report_stack(node)
    result = reconcile_nodes()
    assert _state(node) == to_state and result.moved[to_state] == 1
    assert NodeEvent.objects.filter(node=node, actor="system:reconciler", from_state=state, to_state=to_state).exists()


def test_release_then_wipe_end_to_end(nodes):
    node = place(nodes[0], "releasing")
    _finish(node, "stop")
    reconcile_nodes()
    assert _state(node) == "wiping"
    wipe = NodeAgentAction.objects.get(node=node, action="wipe", state=AgentActionState.PENDING)
    record_action_result(node_id=node.pk, action_id=wipe.pk, action="wipe", status="succeeded")
    reconcile_nodes()
    assert _state(node) == "wiping"  # wiped, but nothing reported since the wipe began
    report_stack(node)
    reconcile_nodes()
    assert _state(node) == "available"


def test_queues_missing_work_once(nodes):
    node = place(nodes[0], "wiping")
    reconcile_nodes()
    reconcile_nodes()
    assert NodeAgentAction.objects.filter(node=node, action="wipe", state="pending").count() == 1
    assert _state(node) == "wiping"


def test_results_from_an_earlier_visit_are_ignored(nodes):
    node = place(nodes[0], "wiping", entered_ago=timedelta(minutes=1))
    old = request_agent_action(node=node, action="wipe", actor="test")
    NodeAgentAction.objects.filter(pk=old.pk).update(state="succeeded", created_at=timezone.now() - timedelta(days=1))
    reconcile_nodes()
    assert _state(node) == "wiping"


def test_agent_that_never_answers_a_wipe_lands_in_wipe_failed(nodes):
    node = place(nodes[0], "wiping")
    reconcile_nodes()  # queues the wipe the agent will never run
    later = timezone.now() + timedelta(minutes=31)
    reconcile_pass(now=later)
    node.refresh_from_db()
    assert node.lifecycle == "wipe_failed"
    assert node.last_error == "wipe not confirmed by the agent within 30 min"
    assert NodeAgentAction.objects.get(node=node, action="wipe").state == AgentActionState.CANCELLED


@pytest.mark.parametrize(
    ("state", "failure"),
    [
        ("burn_in", "burn_in_failed"),
        ("provisioning", "provision_failed"),
        ("releasing", "wipe_failed"),
        ("validating", "triage"),
        ("remediating", "triage"),
        ("draining", "remediating"),
    ],
)
def test_deadline_moves_every_working_state_to_its_failure(nodes, state, failure):
    node = place(nodes[0], state)
    if state == "draining":
        allocate(node)  # the tenant never leaves
    reconcile_pass(now=timezone.now() + timedelta(hours=25))
    node.refresh_from_db()
    assert node.lifecycle == failure and node.last_error


def test_failed_step_backs_off_then_retries_then_fails(nodes):
    node = place(nodes[0], "wiping")
    first = timezone.now()
    _finish(node, "wipe", status="failed", detail="nvme busy", at=first)
    reconcile_pass(now=first)
    node.refresh_from_db()
    assert node.failed_attempts == 1 and node.next_attempt_at == first + backoff(1)
    assert "nvme busy" in node.last_error
    assert not NodeAgentAction.objects.filter(node=node, state="pending").exists()
    reconcile_pass(now=first + timedelta(seconds=1))  # still backing off: not claimed
    assert not NodeAgentAction.objects.filter(node=node, state="pending").exists()
    reconcile_pass(now=first + backoff(1))
    retry = NodeAgentAction.objects.get(node=node, state="pending")
    record_action_result(
        node_id=node.pk,
        action_id=retry.pk,
        action="wipe",
        status="failed",
        detail="again",
        finished_at=first + backoff(1),
    )
    _finish(node, "wipe", status="failed", detail="third", at=first + timedelta(seconds=30))
    reconcile_pass(now=first + timedelta(minutes=2))
    node.refresh_from_db()
    assert node.lifecycle == "wipe_failed" and node.last_error == "wipe failed 3 times; last: third"


def test_backoff_is_exponential_and_capped():
    assert [backoff(n).total_seconds() for n in range(1, 7)] == [5, 10, 20, 40, 60, 60]


def test_drained_node_moves_on_once_the_tenant_left(nodes):
    node = place(nodes[0], "draining")
    membership = allocate(node)
    reconcile_nodes()
    assert _state(node) == "draining"
    membership.ended_at = timezone.now()
    membership.save()
    reconcile_nodes()
    assert _state(node) == "remediating"


def test_crash_after_first_batch_then_rerun_converges(nodes):
    for node in nodes:
        place(node, "wiping")
        _wiped(node)

    def crash(result):
        raise RuntimeError("worker killed")

    with pytest.raises(RuntimeError):
        reconcile_pass(batch_size=3, after_batch=crash)
    assert Node.objects.filter(lifecycle="available").count() == 3  # the first batch committed whole
    result = reconcile_pass(batch_size=3)
    assert Node.objects.filter(lifecycle="available").count() == len(nodes)
    assert result.moved["available"] == len(nodes) - 3
    assert NodeEvent.objects.filter(to_state="available", actor="system:reconciler").count() == len(nodes)


def test_time_budget_stops_claiming(nodes):
    for node in nodes:
        place(node, "wiping")
    result = reconcile_pass(batch_size=2, time_budget_s=0)
    assert not result.complete and result.batches == 0


def test_queries_per_pass_do_not_grow_with_nodes(nodes, django_assert_max_num_queries):
    def run(count):
        for node in nodes[:count]:
            place(node, "wiping")
            _wiped(node)
        with django_assert_max_num_queries(12) as captured:
            reconcile_pass()
        return len(captured)

    small = run(2)
    Node.objects.update(lifecycle="available", state_deadline=None)
    NodeAgentAction.objects.all().delete()
    assert run(len(nodes)) == small


def test_each_batch_is_four_statements(nodes):
    """Claim, read its agent actions, one compare-and-set UPDATE, one COPY of the events (the
    batch's SAVEPOINT pair aside: inside the test's transaction each batch is a savepoint). A
    batch that returns wiped nodes to the pool reads three more: their types, the golden
    baselines and the inventory reported since the wipe began."""
    for node in nodes[:5]:
        place(node, "provisioning")
        _finish(node, "provision")
    with CaptureQueriesContext(connection) as captured:
        result = reconcile_pass(batch_size=2)
    statements = [q["sql"] for q in captured if "SAVEPOINT" not in q["sql"]]
    assert result.batches == 3 and result.moved["active"] == 5
    assert len(statements) == 3 * 4, statements
    for node in nodes[5:7]:
        place(node, "wiping")
        _wiped(node)
    with CaptureQueriesContext(connection) as captured:
        result = reconcile_pass(batch_size=3)
    statements = [q["sql"] for q in captured if "SAVEPOINT" not in q["sql"]]
    assert result.batches == 1 and result.moved["available"] == 2
    assert len(statements) == 4 + 3, "\n".join(s[:120] for s in statements)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_workers_never_act_on_one_node_twice():
    from devtools.services.fleet_seed import seed_fleet

    seed_fleet(gpus=640)
    nodes = list(Node.objects.all())
    for node in nodes:
        place(node, "wiping")
        _wiped(node)
    barrier = threading.Barrier(2)
    errors = []

    def worker():
        try:
            barrier.wait()
            reconcile_pass(batch_size=5)
        except Exception as exc:  # surfaced below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    # Each node moved exactly once, whichever worker claimed it; nodes a worker skipped as
    # locked are picked up by the next pass.
    reconcile_pass()
    assert Node.objects.filter(lifecycle="available").count() == len(nodes)
    for node_id, count in (
        (n.pk, NodeEvent.objects.filter(node_id=n.pk, to_state="available", actor="system:reconciler").count())
        for n in nodes
    ):
        assert count == 1, node_id


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_second_locked_run_skips():
    from core.locks import locked_run

    with locked_run("reconcile_nodes") as held:
        assert held
        outcome = []
        t = threading.Thread(target=lambda: (outcome.append(reconcile_nodes().skipped), connection.close()))
        t.start()
        t.join()
    assert outcome == [True]


def test_run_loops_once_runs_the_reconciler(nodes):
    from io import StringIO

    from django.core.management import call_command

    from fleet.tasks import reconcile_nodes as task

    node = place(nodes[0], "wiping")
    out = StringIO()
    call_command("run_loops", "--once", stdout=out)
    assert out.getvalue().startswith("reconcile_nodes: ")
    assert NodeAgentAction.objects.filter(node=node, action="wipe", state="pending").exists()
    _finish(node, "wipe")  # the pending wipe reported done
    report_stack(node)
    assert task.apply().get()["moved"] == {"available": 1}


def test_work_queued_just_before_the_move_counts(nodes):
    node = nodes[0]
    provision = request_agent_action(node=node, action="provision", actor="placement")
    NodeAgentAction.objects.filter(pk=provision.pk).update(created_at=timezone.now() - timedelta(seconds=5))
    node = place(node, "provisioning")
    reconcile_nodes()
    assert NodeAgentAction.objects.filter(node=node, action="provision").count() == 1
    record_action_result(node_id=node.pk, action_id=provision.pk, action="provision", status="succeeded")
    reconcile_nodes()
    assert _state(node) == "active"


def test_sanitizing_past_deadline_is_flagged_not_moved(nodes):
    node = place(nodes[0], "sanitizing")
    reconcile_pass(now=timezone.now() + timedelta(hours=25))
    node.refresh_from_db()
    assert node.lifecycle == "sanitizing"
    assert node.last_error.startswith("sanitizing did not finish within 24 h")


def test_the_claim_index_covers_every_state_the_reconciler_works_on():
    """fleet_node_working_idx is built from RECONCILED_LIFECYCLES (a migration cannot import the
    reconciler); a state added to one and not the other would be claimed by a table scan or not
    at all."""
    assert WORKING_STATES == frozenset(RECONCILED_LIFECYCLES)
