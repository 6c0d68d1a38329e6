"""The agent's hot path: a quiet heartbeat is one statement, a good heartbeat ends a lease
lapse at once, and desired-state answers 304 to an unchanged ETag."""

from datetime import UTC, timedelta

import pytest
import redis.connection
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from fleet.choices import Health
from fleet.models import Drive, Node, NodeEnergyCounter, NodeEnergyHour, NodeEnergyMonth
from fleet.services.agent_work import request_agent_action
from health.choices import ConditionStatus, Severity
from health.models import Condition
from health.services.sweep import run_health_sweep
from tests.fleet.lifecycle_helpers import allocate, place
from tests.health.conftest import heartbeat_body

pytestmark = pytest.mark.django_db


def _health(node) -> str:
    return Node.objects.values_list("health", flat=True).get(pk=node.pk)


def test_a_quiet_heartbeat_costs_one_statement_whatever_the_gpu_count(nodes, agent_for):
    counts = []
    for node, gpus in ((nodes[0], 8), (nodes[1], 8)):
        agent = agent_for(node)
        assert agent.heartbeat(gpus=gpus).status_code == 202  # first one reads the node type once
        with CaptureQueriesContext(connection) as ctx:
            for _ in range(5):
                assert agent.heartbeat(gpus=gpus).status_code == 202
        counts.append(len(ctx) / 5)
    assert counts == [1, 1], counts


def test_a_good_heartbeat_ends_a_lease_lapse_without_waiting_for_the_sweep(nodes, agent_for):
    lapsed = nodes[0]
    Node.objects.filter(pk=lapsed.pk).update(
        health=Health.UNKNOWN, last_heartbeat_at=timezone.now() - timedelta(minutes=2)
    )
    assert agent_for(lapsed).heartbeat().status_code == 202
    assert _health(lapsed) == Health.HEALTHY  # no sweep ran


def test_a_heartbeat_never_hides_an_active_condition_or_a_fault_it_carries(nodes, agent_for):
    held, faulty = nodes[1], nodes[2]
    Node.objects.filter(pk__in=[held.pk, faulty.pk]).update(health=Health.UNKNOWN)
    Condition.objects.create(
        node=held,
        signal="ib_symbol_errors",
        severity=Severity.WARN,
        status=ConditionStatus.ACTIVE,
        first_seen=timezone.now(),
        last_seen=timezone.now(),
        detail="test",
    )
    assert agent_for(held).heartbeat().status_code == 202
    assert _health(held) == Health.UNKNOWN  # the roll-up decides: degraded, not healthy
    assert agent_for(faulty).heartbeat(faults={0: {"xid_errors": [79]}}).status_code == 202
    assert _health(faulty) == Health.UNKNOWN
    run_health_sweep()
    assert _health(held) == Health.DEGRADED
    assert _health(faulty) != Health.HEALTHY


def test_a_heartbeat_leaves_a_degraded_node_to_the_roll_up(nodes, agent_for):
    node = nodes[3]
    Node.objects.filter(pk=node.pk).update(health=Health.DEGRADED)
    assert agent_for(node).heartbeat().status_code == 202
    assert _health(node) == Health.DEGRADED


def test_desired_state_answers_304_to_an_unchanged_etag_and_200_once_it_changes(nodes, agent_for, ops_api):
    node = nodes[4]
    agent = agent_for(node).client
    first = agent.get("/api/agent/v1/desired-state")
    etag = first["ETag"]
    assert first.status_code == 200 and etag.startswith('"')
    again = agent.get("/api/agent/v1/desired-state", HTTP_IF_NONE_MATCH=etag)
    assert again.status_code == 304 and again.content == b"" and again["ETag"] == etag
    assert agent.get("/api/agent/v1/desired-state", HTTP_IF_NONE_MATCH='"stale", ' + etag).status_code == 304
    assert agent.get("/api/agent/v1/desired-state", HTTP_IF_NONE_MATCH='"stale"').status_code == 200
    # the operator asks for work: the state changes, so the old ETag gets the new body
    response = ops_api.post(
        f"/api/v1/ops/nodes/{node.pk}/actions",
        {"action": "validate", "reason": "suspect"},
        format="json",
        HTTP_IDEMPOTENCY_KEY="etag-1",
    )
    assert response.status_code == 202, response.content
    changed = agent.get("/api/agent/v1/desired-state", HTTP_IF_NONE_MATCH=etag)
    assert changed.status_code == 200 and changed["ETag"] != etag and changed.json() != first.json()


@pytest.mark.redis
def test_a_quiet_heartbeat_costs_one_redis_round_trip(nodes, agent_for, monkeypatch):
    """The agent's throttle (its counter's INCR and EXPIRE and the previous slot's GET) and
    the node's revocation entry, pipelined; a validly signed token skips the
    failed-authentication budget (core.api.authentication)."""
    sent = []
    original = redis.connection.AbstractConnection.send_packed_command

    def counting(self, command, *args, **kwargs):  # one call per round trip, pipelines included
        sent.append(command)
        return original(self, command, *args, **kwargs)

    agent = agent_for(nodes[7])
    assert agent.heartbeat().status_code == 202  # fills the revocation cache and the node-type cache
    monkeypatch.setattr(redis.connection.AbstractConnection, "send_packed_command", counting)
    assert agent.heartbeat().status_code == 202
    assert len(sent) == 1, sent


@pytest.mark.redis
def test_the_shared_revocation_cache_outlives_the_heartbeat_interval(settings):
    """Else every heartbeat at the 10 s interval finds its node's entry expired and pays a
    SELECT and two cache writes (a write-through keeps the longer lifetime exact)."""
    from hangar_agent.config import AgentConfig

    assert "Redis" in settings.CACHES["default"]["BACKEND"]
    assert settings.AGENT_REVOCATION_CACHE_SECONDS > 2 * AgentConfig().heartbeat_interval


def test_a_desired_state_poll_is_one_statement_and_a_second_only_for_pending_actions(nodes, agent_for):
    """The node, its type, its live allocation (the grants) and whether it has pending actions
    in one statement; the actions themselves only when there are some."""
    node = nodes[6]
    place(node, "wiping")
    membership = allocate(node)
    agent = agent_for(node).client
    agent.get("/api/agent/v1/desired-state")  # the revocation entry is cached from here on
    with CaptureQueriesContext(connection) as ctx:
        quiet = agent.get("/api/agent/v1/desired-state")
    assert quiet.status_code == 200 and len(ctx) == 1, [q["sql"][:80] for q in ctx.captured_queries]
    assert quiet.json()["allocation_id"] == str(membership.allocation_id) and quiet.json()["actions"] == []
    [grant] = quiet.json()["metering_grants"]
    assert grant["allocation_id"] == str(membership.allocation_id)
    wipe = request_agent_action(node=node, action="wipe", actor="test")
    with CaptureQueriesContext(connection) as ctx:
        busy = agent.get("/api/agent/v1/desired-state")
    assert busy.status_code == 200 and len(ctx) == 2, [q["sql"][:80] for q in ctx.captured_queries]
    assert busy.json()["actions"] == [{"id": str(wipe.pk), "action": "wipe", "params": {}}]


def test_desired_state_reads_the_grant_window_from_the_membership_start(nodes, agent_for):
    """The hand-written statement's timestamps come back as the ORM's would (aware UTC, on
    SQLite too), so the grant window starts at the membership's start to the second."""
    node = nodes[5]
    membership = allocate(node)
    [grant] = agent_for(node).client.get("/api/agent/v1/desired-state").json()["metering_grants"]
    started = membership.started_at.astimezone(UTC).replace(microsecond=0)
    assert grant["valid_from"] == started.isoformat().replace("+00:00", "Z")


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(connection.vendor != "postgresql", reason="asynchronous commit is PostgreSQL's")
def test_a_heartbeat_on_its_own_skips_the_wal_flush_and_nothing_else_does(nodes, agent_for):
    from django.db import transaction

    from health.services.ingest import ingest_heartbeat

    node = nodes[0]
    agent = agent_for(node)
    assert agent.heartbeat().status_code == 202
    before = Node.objects.values_list("last_heartbeat_at", flat=True).get(pk=node.pk)
    with CaptureQueriesContext(connection) as ctx:
        assert agent.heartbeat().status_code == 202
    (update,) = [q["sql"] for q in ctx.captured_queries]
    assert "set_config('synchronous_commit', 'off', true)" in update
    # The node row was written (committed, visible to a new transaction) and the connection's
    # own setting is untouched: the next write on it commits synchronously.
    assert Node.objects.values_list("last_heartbeat_at", flat=True).get(pk=node.pk) > before
    with connection.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        assert cursor.fetchone()[0] == "on"
    # Inside a caller's transaction the plain statement runs, so that commit stays durable.
    with transaction.atomic(), CaptureQueriesContext(connection) as ctx:
        ingest_heartbeat(node_id=node.pk, power_state="on", gpus=[], now=timezone.now())
    assert "set_config" not in ctx.captured_queries[0]["sql"]


def test_a_periodic_health_report_with_its_drives_takes_twelve_statements(nodes, agent_for):
    """The five-minutely report: the node's row locked (which is also its existence check), the
    stored inventory, the node's drives and any registered elsewhere, one UPDATE of the drive
    rows, one of the inventory, one INSERT of the results, the conditions (in their own
    savepoint), and the transaction around it all. It took 18 before the existence probe, the
    drive reconcile's savepoint and update_or_create's savepoint and second read went."""
    node = nodes[0]
    drives = [
        {"serial": d.serial, "model": d.model, "capacity_gb": d.capacity_gb, "self_encrypting": True}
        for d in node.drives.order_by("serial")
    ]
    assert drives
    agent = agent_for(node)

    def report():
        body = {
            "observed_at": timezone.now().isoformat().replace("+00:00", "Z"),
            "checks": [{"name": "dcgm_r1", "status": "pass", "detail": ""}],
            "drives": drives,
        }
        return agent.client.post("/api/agent/v1/health-reports", body, format="json")

    assert report().status_code == 202  # the first one creates the inventory row
    with CaptureQueriesContext(connection) as ctx:
        assert report().status_code == 202
    statements = [q["sql"] for q in ctx.captured_queries]
    assert len(statements) == 12, statements
    assert sum("fleet_nodedriveinventory" in s for s in statements) == 2  # read once, written once
    assert not any(s.startswith("SELECT 1 AS") for s in statements)  # no separate existence probe


def test_a_health_report_for_a_node_that_is_gone_is_refused_and_stores_nothing(nodes, agent_for):
    node = nodes[0]
    agent = agent_for(node)
    body = {
        "observed_at": timezone.now().isoformat().replace("+00:00", "Z"),
        "checks": [{"name": "dcgm_r1", "status": "pass", "detail": ""}],
        "drives": [{"serial": "S-GONE-1", "model": "m", "capacity_gb": 3840}],
    }
    Node.objects.filter(pk=node.pk).delete()
    response = agent.client.post("/api/agent/v1/health-reports", body, format="json")
    assert response.status_code == 404 and response.json()["code"] == "not_found"
    assert not Drive.objects.filter(serial="S-GONE-1").exists()


def test_a_heartbeat_that_integrates_energy_counters_adds_two_statements_on_postgresql(nodes, agent_for):
    """Once a minute a node's counters are integrated: the baseline read and one write (the
    compare-and-set of the baseline with its hour and month rows). SQLite, without writable
    CTEs, writes them one after another in a transaction."""
    node = nodes[0]
    agent = agent_for(node)

    def beat(mj: int, wall_j: int):
        body = {**heartbeat_body(8), "wall_power": {"watts": 5000, "source": "bmc", "energy_j": wall_j}}
        for g in body["gpus"]:
            g["energy_mj"] = mj
        assert agent.heartbeat(body=body).status_code == 202

    beat(1_000_000, 10_000_000)  # the baseline
    NodeEnergyCounter.objects.filter(node=node).update(read_at=timezone.now() - timedelta(seconds=61))
    with CaptureQueriesContext(connection) as ctx:
        beat(1_000_000 + 61 * 400_000, 10_000_000 + 61 * 5000)
    writes = 1 if connection.vendor == "postgresql" else 3  # the one statement, or update + hour + month
    statements = [q["sql"][:60] for q in ctx if not q["sql"].startswith(("SAVEPOINT", "RELEASE SAVEPOINT"))]
    assert len(statements) == 1 + 1 + writes, statements  # (the savepoints are the test's own transaction)
    assert sum(NodeEnergyHour.objects.filter(node=node).values_list("it_energy_j", flat=True)) == 61 * 5000
    assert sum(NodeEnergyMonth.objects.filter(node=node).values_list("it_energy_j", flat=True)) == 61 * 5000
    with CaptureQueriesContext(connection) as ctx:
        beat(1_000_000 + 62 * 400_000, 10_000_000 + 62 * 5000)  # too soon: no read, no write
    assert len(ctx) == 1
