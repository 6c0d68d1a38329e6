"""The fault suite: real processes (gunicorn, a Celery worker), real kills, a real database
stop, on the cluster tests/chaos/harness.py started. Skipped outside `make chaos`.

Durations are stated (docs/faults.md): the database is down for at least OUTAGE_S (30 s).
"""

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import requests
from django.conf import settings
from django.db import close_old_connections, connections

pytestmark = [
    pytest.mark.chaos,
    pytest.mark.skipif(not os.environ.get("HANGAR_CHAOS_PG_START"), reason="run by `make chaos` (its own cluster)"),
    # default only: the ledger's append-only triggers refuse the TRUNCATE a flush would need,
    # so the billing scenario reads the ledger through its own connection (the cluster is thrown away)
    pytest.mark.django_db(transaction=True),
]
ROOT = Path(__file__).resolve().parents[2]
# Shortened from the production 480 s so the scenario takes a minute; still above how long a
# draft refresh takes here, or the message would be delivered again while it runs.
CHAOS_VISIBILITY_TIMEOUT_S = 25


def record(name: str, value) -> None:
    path = Path(os.environ["HANGAR_CHAOS_FIGURES"])
    figures = json.loads(path.read_text()) if path.exists() else {}
    figures[name] = value
    path.write_text(json.dumps(figures, indent=2, sort_keys=True))


def _db_url(alias: str) -> str:
    db = settings.DATABASES[alias]
    return f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"


def child_env(**extra) -> dict:
    """The test databases pytest-django created, for the processes the test starts."""
    return {
        **os.environ,
        "DATABASE_URL": _db_url("default"),
        "LEDGER_DATABASE_URL": _db_url("ledger"),
        "DJANGO_SETTINGS_MODULE": "config.settings",
        **extra,
    }


def pg(action: str) -> None:
    subprocess.run(os.environ[f"HANGAR_CHAOS_PG_{action.upper()}"].split("\x1f"), check=True, capture_output=True)


def _free_port() -> int:
    from tests.chaos.harness import free_port

    return free_port()


class Server:
    """gunicorn on a free port; its master respawns a worker that dies, as in production."""

    def __init__(self, **env):
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gunicorn",
                "config.wsgi:application",
                "-b",
                f"127.0.0.1:{self.port}",
                "-w",
                "1",
                "--threads",
                "4",
                "--timeout",
                "30",
                "--graceful-timeout",
                "2",
            ],
            cwd=ROOT,
            env=child_env(**env),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                requests.get(self.url + "/api/v1/no-such-endpoint", timeout=15)
                return
            except requests.RequestException:
                time.sleep(0.3)
        raise RuntimeError("gunicorn did not start")

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=20)


@pytest.fixture
def fleet(db):
    from devtools.services.fleet_seed import seed_fleet

    seed_fleet(gpus=32)


@pytest.fixture
def tenant_token():
    from core.services.tokens import create_api_token
    from tenants.services.tenants import create_tenant

    tenant = create_tenant(slug="chaos", name="Chaos", max_nodes=8, actor="test")[0]
    _, plain = create_api_token(kind="tenant", tenant=tenant, role="member", actor="test")
    return plain


def test_kill_between_the_idempotency_phases_leaves_one_allocation(fleet, tenant_token, tmp_path):
    from tenants.models import Allocation

    server = Server(HANGAR_FAULT_POINTS=f"idempotency.after_perform=exit-once:{tmp_path / 'fired'}")
    try:
        headers = {"Authorization": f"Bearer {tenant_token}", "Idempotency-Key": "chaos-1"}
        body = {"name": "train", "instance_type": "h100-sxm-8x", "node_count": 1}
        try:  # the worker dies (os._exit) after the work, before the commit
            answer = requests.post(server.url + "/api/v1/allocations", json=body, headers=headers, timeout=20)
            pytest.fail(f"the fault point did not fire: {answer.status_code} {answer.text[:300]}")
        except requests.ConnectionError:
            pass
        killed = time.monotonic()
        assert (tmp_path / "fired").exists()
        answers = []
        while time.monotonic() - killed < 60:
            try:
                response = requests.post(server.url + "/api/v1/allocations", json=body, headers=headers, timeout=20)
            except requests.ConnectionError:
                time.sleep(0.5)
                continue
            answers.append(response.status_code)
            if response.status_code == 202:
                break
            time.sleep(0.5)
        recovered = time.monotonic() - killed
        again = requests.post(server.url + "/api/v1/allocations", json=body, headers=headers, timeout=20)
    finally:
        server.stop()
    assert answers[-1] == 202 and again.status_code == 202 and again.headers["Idempotent-Replayed"] == "true"
    assert again.json()["id"] == response.json()["id"]
    assert Allocation.objects.count() == 1
    record(
        "idempotency_kill",
        {
            "allocations": Allocation.objects.count(),
            "retry_answers": answers,
            "seconds_to_202_after_kill": round(recovered, 1),
        },
    )


METERING_NODES = 2
# Shortened from the 30 s only by how long the probes take: the loop below keeps the
# database down for at least this long (measured_down_seconds says how long it really was).
OUTAGE_S = 30

USAGE_SNIPPET = """
import json, sys, django
django.setup()
from billing.models import UsageEvent
rows = UsageEvent.objects.filter(allocation_id=sys.argv[1]).order_by("node_id", "start")
print(json.dumps([[str(r.node_id), r.start.isoformat(), r.end.isoformat(), r.quantity_micro] for r in rows]))
"""


def _usage_events(allocation_id) -> list:
    """The ledger's events of one allocation, read through a child process (like `ledger`)."""
    out = subprocess.run(
        [sys.executable, "-c", USAGE_SNIPPET, str(allocation_id)],
        cwd=ROOT,
        env=child_env(),
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _start_metering(nodes) -> object:
    """A tenant's allocation running on `nodes` (active, one live membership each), so their agents meter."""
    from django.utils import timezone

    from fleet.choices import Lifecycle
    from fleet.services.lifecycle import transition
    from tenants.models import Allocation, AllocationNode
    from tenants.services.tenants import create_tenant

    tenant = create_tenant(slug="metered", name="Metered", max_nodes=8, actor="test")[0]
    now = timezone.now()
    allocation = Allocation.objects.create(
        tenant=tenant,
        name="train",
        instance_type=nodes[0].node_type,
        node_count=len(nodes),
        state="active",
        activated_at=now,
        fabric_domain=nodes[0].fabric_domain,
    )
    for node in nodes:
        transition(node, Lifecycle.PROVISIONING, actor="test", action="place")
        transition(node, Lifecycle.ACTIVE, actor="test", action="provisioned")
        AllocationNode.objects.create(allocation=allocation, node=node, started_at=now)
    return allocation


def _usage_gaps(events: list, started: dict, observed_until: datetime, gpus: int) -> dict:
    """Per metering node: the node-minutes it ran (from its first observation to the last whole
    minute before the last tick) against the ledger's events: missing, doubled, GPU-hours."""
    by_node: dict = {}
    for node_id, start, end, micro in events:
        by_node.setdefault(node_id, []).append((datetime.fromisoformat(start), datetime.fromisoformat(end), micro))
    report = {
        "nodes_with_gaps": 0,
        "minutes_missing": 0,
        "minutes_doubled": 0,
        "minutes_unexpected": 0,
    }
    expected_gpu_s = recorded_micro = 0
    for node_id, first in started.items():
        minutes = int((observed_until - first).total_seconds() // 60)
        expected = [first + timedelta(minutes=i) for i in range(minutes)]
        rows = by_node.get(node_id, [])
        starts = [start for start, _, _ in rows]
        missing = [m for m in expected if m not in starts]
        doubled = len(starts) - len(set(starts))
        ragged = [r for r in rows if r[1] - r[0] != timedelta(minutes=1)]  # a closed-early interval is a gap
        report["minutes_missing"] += len(missing)
        report["minutes_doubled"] += doubled
        report["minutes_unexpected"] += len(set(starts) - set(expected))
        report["nodes_with_gaps"] += bool(missing or doubled or ragged)
        expected_gpu_s += gpus * 60 * minutes
        recorded_micro += sum(micro for _, _, micro in rows)
    report["recorded_equals_expected"] = recorded_micro == expected_gpu_s * 1_000_000
    report["gpu_hours_expected"] = round(expected_gpu_s / 3600, 4)
    report["gpu_hours_recorded"] = round(recorded_micro / 1e6 / 3600, 4)
    return report


def test_a_database_outage_gives_503s_not_500s_and_the_simulator_keeps_going(fleet, operator_token):
    from devtools.simulator import FleetSimulator
    from fleet.choices import Lifecycle
    from fleet.models import Node

    server = Server()
    try:
        nodes = list(Node.objects.select_related("node_type", "fabric_domain").order_by("hostname"))
        hosts = [n.hostname for n in nodes]
        metered = nodes[:METERING_NODES]
        allocation = _start_metering(metered)
        gpus = metered[0].node_type.gpus_per_node
        simulator = FleetSimulator(url=server.url, speed=1.0, seed=7, hostnames=hosts)
        assert simulator.refresh(datetime.now(UTC)) == len(hosts)
        ops = {"Authorization": f"Bearer {operator_token}"}
        statuses: dict[int, int] = {}
        ticks: list[datetime] = []

        def tick(seconds: float, *, probe: bool, until=None):
            end = time.monotonic() + seconds
            while time.monotonic() < end and not (until and until()):
                now = datetime.now(UTC)
                ticks.append(now)
                simulator.step(now)
                simulator.refresh(now)
                if probe:
                    for path in ("/api/v1/ops/nodes", "/api/v1/allocations", "/fleet/nodes/"):
                        code = requests.get(
                            server.url + path, headers=ops, timeout=10, allow_redirects=False
                        ).status_code
                        statuses[code] = statuses.get(code, 0) + 1
                time.sleep(0.5)

        # 45 s before the outage: the first metered minute closes while the database is down.
        tick(45, probe=False)
        # Each metering agent opened its first interval at its first tick (to the second).
        started = {str(n.pk): ticks[0].replace(microsecond=0) for n in metered}
        spooled = lambda: sum(simulator.agents[n.hostname].spool.pending("meter") for n in metered)  # noqa: E731
        pg("stop")
        down_at = time.monotonic()
        tick(OUTAGE_S, probe=True)
        spooled_during_outage = spooled()  # closed while the ledger was away: kept, not lost
        pg("start")
        down_for = time.monotonic() - down_at
        restarted = datetime.now(UTC)
        for conn in connections.all():
            conn.close()
        close_old_connections()
        tick(15, probe=False)
        fresh = Node.objects.filter(hostname__in=hosts, last_heartbeat_at__gt=restarted).count()
        # Meter until the first whole minute after the restart has closed and every spool is empty.
        first = min(started.values())
        close_at = first + timedelta(minutes=int((restarted - first).total_seconds() // 60) + 1)
        tick(150, probe=False, until=lambda: datetime.now(UTC) > close_at + timedelta(seconds=2) and not spooled())
        left_in_spools = spooled()
        lifecycles = dict(Node.objects.filter(hostname__in=hosts).values_list("hostname", "lifecycle"))
    finally:
        server.stop()
    assert 500 not in statuses and statuses.get(503, 0) > 0, statuses
    assert len(simulator.agents) == len(hosts) and simulator.refresh_failures > 0
    assert fresh == len(hosts)  # every agent reported again after the restart
    assert {lifecycles[n.hostname] for n in metered} == {Lifecycle.ACTIVE}
    assert {lifecycles[h] for h in hosts[METERING_NODES:]} == {Lifecycle.AVAILABLE}
    # No usage gap: every node-minute across the outage is in the ledger exactly once.
    usage = _usage_gaps(_usage_events(allocation.pk), started, ticks[-1].replace(microsecond=0), gpus)
    assert spooled_during_outage > 0 and left_in_spools == 0
    assert usage["nodes_with_gaps"] == 0 and usage["minutes_unexpected"] == 0, usage
    assert usage["recorded_equals_expected"] and usage["gpu_hours_expected"] > 0, usage
    assert ticks[-1] - first > timedelta(seconds=down_for + 60)  # the metered span covers the outage
    record(
        "database_outage",
        {
            "outage_seconds": OUTAGE_S,
            "statuses_during_outage": statuses,
            "simulator_refresh_failures": simulator.refresh_failures,
            "agents_alive": len(simulator.agents),
            "nodes_reporting_within_15_s_of_restart": f"{fresh}/{len(hosts)}",
            "measured_down_seconds": round(down_for, 1),
            "metering_nodes": f"{METERING_NODES - usage['nodes_with_gaps']}/{METERING_NODES} without a usage gap",
            "meter_events_spooled_during_outage": spooled_during_outage,
            "usage": usage,
        },
    )


def _worker(tmp_path: Path, **env):
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "config",
            "worker",
            "--pool=solo",
            "--without-heartbeat",
            "--without-mingle",
            "--without-gossip",
            "-l",
            "warning",
        ],
        cwd=ROOT,
        env=child_env(CELERY_VISIBILITY_TIMEOUT_S=str(CHAOS_VISIBILITY_TIMEOUT_S), **env),
        stdout=open(tmp_path / "worker.log", "ab"),
        stderr=subprocess.STDOUT,
    )


LEDGER_SNIPPET = """
import json, sys, uuid, django
django.setup()
from billing.models import BillingRun, Invoice
if sys.argv[1] == "ingest":
    from billing.services.ingest import ingest_meter_events
    ingest_meter_events(node_id=uuid.uuid4(), events=json.loads(sys.argv[2]))
period = json.loads(sys.argv[2])[0]["start"][:8] + "01"  # the month the usage falls in
print(json.dumps({"invoices": Invoice.objects.count(), "runs": BillingRun.objects.filter(period=period).count()}))
"""


def ledger(tmp_path, command: str, events) -> dict:
    """Ingest (or just count) through a child process: invoices, and billing runs of the usage's month
    (a draft refresh also re-rates last month while it is in grace: that run is not counted)."""
    out = subprocess.run(
        [sys.executable, "-c", LEDGER_SNIPPET, command, json.dumps(events)],
        cwd=ROOT,
        env=child_env(),
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_killed_billing_task_is_rerun_within_minutes_and_bills_once(tmp_path):
    from config.celery import app

    tenant = uuid.uuid4()
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
    if start.month != datetime.now(UTC).month:  # keep the usage inside the current (draft) month
        start = datetime.now(UTC).replace(microsecond=0, second=0, minute=0)
    events = [
        {
            "event_id": str(uuid.uuid4()),
            "allocation_id": str(uuid.UUID(int=1)),
            "tenant_id": str(tenant),
            "sku": "h100-sxm-8x",
            "start": (start + timedelta(minutes=i)).isoformat().replace("+00:00", "Z"),
            "end": (start + timedelta(minutes=i + 1)).isoformat().replace("+00:00", "Z"),
            "quantity": "480",
            "unit": "gpu_second",
        }
        for i in range(5)
    ]
    assert ledger(tmp_path, "ingest", events) == {"invoices": 0, "runs": 0}
    first = _worker(tmp_path, HANGAR_FAULT_POINTS=f"billing.after_write=exit-once:{tmp_path / 'fired'}")
    second = None
    try:
        sent = time.monotonic()
        app.send_task("billing.tasks.refresh_draft_invoices")
        first.wait(timeout=90)  # the worker dies in the middle of the run (os._exit, like kill -9)
        killed = time.monotonic()
        assert (tmp_path / "fired").exists() and ledger(tmp_path, "count", events) == {"invoices": 0, "runs": 0}
        second = _worker(tmp_path)
        while time.monotonic() - killed < 180 and not ledger(tmp_path, "count", events)["invoices"]:
            time.sleep(1)
        rerun_after = time.monotonic() - killed
        time.sleep(CHAOS_VISIBILITY_TIMEOUT_S + 5)  # one more visibility timeout: nothing is delivered again
        final = ledger(tmp_path, "count", events)
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=20)
    assert final == {"invoices": 1, "runs": 1}, final
    record(
        "killed_billing_task",
        {
            "visibility_timeout_s": CHAOS_VISIBILITY_TIMEOUT_S,
            **final,
            "seconds_from_kill_to_invoice": round(rerun_after, 1),
            "seconds_from_send_to_kill": round(killed - sent, 1),
        },
    )
