"""Node reconciler: one pass over the 12,500-node (and the 125,000-node) fixture with 5% of nodes drifted."""

import time
import uuid

from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from benchmarks.fixtures import LARGE
from benchmarks.harness import Measurement, benchmark
from fleet.models import Node, NodeAgentAction, NodeEvent
from fleet.services.lifecycle import STATE_TIMEOUTS
from fleet.services.reconcile import reconcile_nodes

DRIFT = 0.05


def _drift() -> list:
    """Benchmark setup only: 5% of nodes sit in `wiping` with a succeeded wipe result."""
    ids = list(Node.objects.order_by("pk").values_list("pk", flat=True))
    drifted = ids[:: int(1 / DRIFT)]
    now = timezone.now()
    with transaction.atomic():
        NodeAgentAction.objects.all().delete()
        Node.objects.filter(pk__in=drifted).update(lifecycle="wiping", state_deadline=now + STATE_TIMEOUTS["wiping"])
        NodeAgentAction.objects.bulk_create(
            [
                NodeAgentAction(node_id=pk, action="wipe", state="succeeded", requested_by="bench", finished_at=now)
                for pk in drifted
            ],
            batch_size=2000,
        )
    return drifted


def _baseline(drifted_count: int) -> float:
    """The same reads and writes in hand-written SQL: claim the working nodes, read their
    results, move the confirmed ones and write their events."""
    with transaction.atomic(), connection.cursor() as cursor:
        started = time.perf_counter()
        cursor.execute(
            "SELECT id, lifecycle, state_deadline FROM fleet_node WHERE lifecycle IN "
            "('burn_in','provisioning','releasing','wiping','draining','remediating','validating') "
            "ORDER BY id"
        )
        nodes = cursor.fetchall()
        ids = [n[0] for n in nodes]
        marks = ",".join(["%s"] * len(ids))
        cursor.execute(
            f"SELECT node_id FROM fleet_nodeagentaction WHERE node_id IN ({marks}) "
            "AND action = 'wipe' AND state = 'succeeded'",
            ids,
        )
        done = [r[0] for r in cursor.fetchall()]
        now = timezone.now()
        cursor.execute(
            f"UPDATE fleet_node SET lifecycle = 'available', state_deadline = NULL, updated_at = %s "
            f"WHERE id IN ({','.join(['%s'] * len(done))}) AND lifecycle = 'wiping'",
            [now, *done],
        )
        cursor.executemany(
            "INSERT INTO fleet_nodeevent (id, node_id, at, actor, action, from_state, to_state, reason, request_id) "
            "VALUES (%s, %s, %s, 'bench', 'reconcile', 'wiping', 'available', '', '')",
            [(uuid.uuid4().hex if connection.vendor == "sqlite" else uuid.uuid4(), pk, now) for pk in done],
        )
        elapsed = time.perf_counter() - started
        assert len(done) == drifted_count
    return elapsed


@benchmark("reconcile pass (12,500 nodes, 5% drifted)", target="≤ 1 s, ≤ 3x raw SQL, queries fixed")
def reconcile_pass_bench() -> Measurement:
    return _reconcile_pass()


@benchmark("reconcile pass (125,000 nodes, 5% drifted)", fixture=LARGE, target="≤ 2 s, linear in nodes")
def reconcile_pass_125k() -> Measurement:
    return _reconcile_pass()


def _reconcile_pass() -> Measurement:
    drifted = _drift()
    with CaptureQueriesContext(connection) as ctx:
        started = time.perf_counter()
        result = reconcile_nodes(time_budget_s=60)
        ours = time.perf_counter() - started
    assert result.moved["available"] == len(drifted) and result.complete, result.as_dict()
    _drift()
    baseline = _baseline(len(drifted))
    NodeEvent.objects.filter(actor="bench").delete()
    Node.objects.filter(pk__in=drifted).update(lifecycle="available", state_deadline=None)
    return Measurement(
        ours,
        baseline,
        len(ctx.captured_queries),
        note=f"{len(drifted)} nodes wiping→available in {result.batches} batches of 500; "
        f"baseline = the same SELECTs, UPDATE and event INSERT by hand",
    )
