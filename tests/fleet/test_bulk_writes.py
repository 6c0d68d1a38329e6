"""core.bulk's hot-path writes (placement, transition_many, request_agent_actions): one INSERT
without model instances, and one compare-and-set UPDATE … RETURNING."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from core.bulk import insert_values, update_returning, update_rows
from fleet.choices import AgentAction, Lifecycle
from fleet.models import Drive, Node, NodeAgentAction, NodeEvent

pytestmark = pytest.mark.django_db


def test_insert_values_fills_defaults_shares_values_and_batches(small_fleet):
    nodes = list(Node.objects.order_by("hostname")[:2])
    rows = [{"node_id": nodes[i % 2].pk, "reason": f"r{i}"} for i in range(2001)]
    with CaptureQueriesContext(connection) as statements:
        insert_values(
            NodeEvent, rows, using="default", shared={"at": nodes[0].created_at, "actor": "test", "action": "bulk"}
        )
    # 2,000 rows a statement; fewer where the backend caps a statement's parameters (SQLite).
    fields = NodeEvent._meta.concrete_fields
    per_statement = min(2000, connection.ops.bulk_batch_size(fields, rows))
    assert len(statements) == -(-2001 // per_statement)
    if connection.vendor == "postgresql":
        assert len(statements) == 2
    events = NodeEvent.objects.filter(action="bulk")
    assert events.count() == 2001
    assert len(set(events.values_list("id", flat=True))) == 2001  # a generated key per row
    assert set(events.values_list("actor", "from_state", "request_id").distinct()) == {("test", "", "")}
    assert events.filter(reason="r2000", node_id=nodes[0].pk).exists()


def test_insert_values_takes_a_column_that_is_null_in_every_row(small_fleet):
    nodes = list(Node.objects.order_by("hostname")[:2])
    rows = [{"node_id": n.pk, "drive_id": None} for n in nodes]

    def queue():
        return insert_values(
            NodeAgentAction,
            rows,
            using="default",
            shared={"action": AgentAction.PROVISION, "requested_by": "test"},
            ignore_conflicts=True,
            returning=True,
        )

    queued = queue()
    assert len(queued) == 2 and set(NodeAgentAction.objects.values_list("pk", flat=True)) == set(queued)
    again = queue()
    assert again == []  # one pending per kind: the constraint skipped both
    assert NodeAgentAction.objects.get(node=nodes[0]).created_at is not None  # auto_now_add


def test_update_returning_moves_only_rows_that_still_hold_the_expectation(small_fleet):
    nodes = list(Node.objects.order_by("hostname")[:3])
    Node.objects.filter(pk=nodes[0].pk).update(lifecycle=Lifecycle.ACTIVE)  # test setup: it moved
    moved = update_returning(
        Node,
        [n.pk for n in nodes],
        values={"lifecycle": Lifecycle.QUARANTINED, "next_attempt_at": None},
        expected={"lifecycle": Lifecycle.AVAILABLE},
        using=connection.alias,
    )
    assert set(moved) == {nodes[1].pk, nodes[2].pk}
    assert Node.objects.get(pk=nodes[0].pk).lifecycle == Lifecycle.ACTIVE
    assert set(Node.objects.filter(pk__in=moved).values_list("lifecycle", flat=True)) == {Lifecycle.QUARANTINED}


def test_update_rows_writes_each_rows_own_values_in_one_statement(small_fleet):
    """One UPDATE … FROM a VALUES list on PostgreSQL and on SQLite alike: datetimes, NULLs,
    booleans, text and integers land on their own row; rows not listed keep theirs."""
    node = Node.objects.order_by("hostname").first()
    drives = [
        Drive.objects.create(node=node, serial=f"BULK-{i}", model="old", capacity_gb=100, purge_supported=True)
        for i in range(3)
    ]
    untouched = Drive.objects.create(node=node, serial="BULK-X", model="old", capacity_gb=100)
    seen = node.created_at
    for i, drive in enumerate(drives[:2]):
        drive.model, drive.capacity_gb, drive.self_encrypting = f"new-{i}", 200 + i, i == 1
        drive.last_reported_at, drive.missing_since = seen, None if i == 0 else seen
        drive.purge_supported = False
    with CaptureQueriesContext(connection) as statements:
        update_rows(
            Drive,
            drives[:2],
            ["model", "capacity_gb", "self_encrypting", "last_reported_at", "missing_since", "purge_supported"],
            using="default",
        )
    assert len(statements) == 1 and "CASE" not in statements[0]["sql"]
    got = {
        d.serial: (d.model, d.capacity_gb, d.self_encrypting, d.last_reported_at, d.missing_since, d.purge_supported)
        for d in Drive.objects.filter(serial__startswith="BULK-")
    }
    assert got["BULK-0"] == ("new-0", 200, False, seen, None, False)
    assert got["BULK-1"] == ("new-1", 201, True, seen, seen, False)
    assert got["BULK-2"] == ("old", 100, False, None, None, True)
    assert got["BULK-X"] == ("old", 100, False, None, None, untouched.purge_supported)
