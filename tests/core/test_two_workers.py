"""Two worker processes running every control loop at once act on no node or allocation twice.

Issue #18: a fleet is seeded with work for the loops (nodes whose agents confirmed a step or
whose deadline passed, nodes missing their step's work, nodes on the bring-up ladder, a
rollout's canary, pending allocations, silent nodes, an over-power rack), committed so other
processes see it. Two OS processes then start together (a file barrier) and each runs
`manage.py run_loops --once` over and over for a few seconds against the same test databases
and Redis. Afterwards the audit trail and the domain tables must show every piece of work done
exactly once, and the loops' own summaries must show both processes ran passes and that passes
met the other process's lock (so the two really overlapped).
"""

import json
import os
import random
import subprocess
import sys
import time
import zlib
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection, connections
from django.db.models import Count
from django.utils import timezone

from billing.partitions import is_partitioned
from core.loops import control_loops
from core.models import AuditEvent, LoopRun
from devtools.services.demo_software import golden_versions
from devtools.services.fleet_seed import seed_fleet
from fleet.choices import AgentActionState
from fleet.choices import Lifecycle as L
from fleet.models import Node, NodeAgentAction, NodeEvent, PowerPoint, RolloutNode
from fleet.services.agent_results import record_action_result
from fleet.services.agent_work import request_agent_action
from fleet.services.baselines import create_baseline
from fleet.services.lifecycle import STATE_TIMEOUTS
from fleet.services.rollouts import create_rollout
from fleet.services.software_inventory import Component, store_software_inventory
from hangar_agent.software import CUDA_OF_DRIVER, DRIVERS, SimulatedStack
from health.models import Condition, ConditionEvent, Incident, RackPowerCondition
from tenants.models import Allocation, AllocationNode, Tenant

from ..fleet.lifecycle_helpers import place

ROOT = Path(__file__).resolve().parents[2]
RUN_SECONDS = 8.0
ARRIVALS = 10  # one-node allocations asked for during the run (the seed leaves 12 nodes free)

pytestmark = [
    pytest.mark.slow,  # subprocess and scale: two worker processes over a 320-GPU fleet
    pytest.mark.skipif(
        connection.vendor != "postgresql",
        reason="needs PostgreSQL (set DATABASE_URL): two processes share one database only there",
    ),
    pytest.mark.skipif(not settings.REDIS_URL, reason="needs Redis (set REDIS_URL): the workers share its cache"),
    # Committed rows, so the worker processes see the seed; the ledger is not flushed (its
    # append-only triggers refuse it): the one loop that writes it only makes partitions.
    pytest.mark.django_db(transaction=True),
]

# Each worker is a process like a Celery worker with a thread per loop: Django set up and one
# connection per loop open, it waits at the barrier for the other worker, then every loop runs
# again and again in its own thread (as `run_loops` runs it: its callable, its LoopRun record)
# until the time is up. It prints each pass as [loop name, the loop's summary].
WORKER = """
import json, sys, threading, time, traceback
from pathlib import Path
import django
django.setup()
from django.db import connection, connections
from django.utils import timezone
from django.utils.module_loading import import_string
from core.loop_metrics import record_loop_run
from billing.partitions import is_partitioned
from core.loops import control_loops
from core.management.commands.run_loops import _summary
barrier, me, seconds = Path(sys.argv[1]), sys.argv[2], float(sys.argv[3])
go, passes, errors = threading.Event(), [], []
def run(loop):
    try:
        connection.ensure_connection()
        ready.wait()
        go.wait()
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            started = time.perf_counter()
            result = import_string(loop.callable_path)()
            record_loop_run(loop.name, seconds=time.perf_counter() - started, finished_at=timezone.now())
            passes.append([loop.name, _summary(result)])
    except Exception:
        errors.append(traceback.format_exc())
    finally:
        connection.close()
loops = control_loops()
ready = threading.Barrier(len(loops) + 1)
threads = [threading.Thread(target=run, args=(loop,)) for loop in loops]
for thread in threads:
    thread.start()
ready.wait()
(barrier / me).touch()
while len(list(barrier.iterdir())) < 2:
    time.sleep(0.002)
go.set()
for thread in threads:
    thread.join()
if errors:
    sys.exit("\\n".join(errors))
print(json.dumps(passes))
"""


def _url(alias: str) -> str:
    s = connections[alias].settings_dict
    auth = s["USER"] + (f":{s['PASSWORD']}" if s["PASSWORD"] else "")
    return f"postgres://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


def _env(tmp_path) -> dict:
    """The test databases (not the ones the suite was pointed at), the suite's Redis and secrets."""
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.test_settings",
        "DATABASE_URL": _url("default"),
        "LEDGER_DATABASE_URL": _url("ledger"),
        "REDIS_URL": settings.REDIS_URL,
        "HANGAR_VAR_DIR": str(tmp_path / "var"),
    }


def _confirmed(node: Node, action: str) -> None:
    row = request_agent_action(node=node, action=action, actor="test")
    record_action_result(node_id=node.pk, action_id=row.pk, action=action, status="succeeded")


def _stack(node: Node) -> None:
    """The node's agent reports a complete stack: every bring-up layer passes."""
    stack = SimulatedStack(random.Random(zlib.crc32(node.hostname.encode())), node.node_type.generation)
    store_software_inventory(
        node=node, components=[Component(**c) for c in stack.components()], observed_at=timezone.now()
    )


def _seed() -> dict:
    seed_fleet(gpus=320)
    nodes = list(Node.objects.select_related("node_type", "rack").order_by("hostname"))
    now = timezone.now()
    Node.objects.update(last_heartbeat_at=now)  # every agent fresh, but the silent ones below
    work = {
        "wiped": nodes[0:6],  # wiping, wipe confirmed → available (reconciler)
        "overdue": nodes[6:10],  # provisioning past its deadline → provision_failed (reconciler)
        "releasing": nodes[10:14],  # releasing without a stop → one stop queued (reconciler)
        "bringing_up": nodes[14:17],  # complete stack → burn_in, one burn_in queued (bring-up)
        "canary": nodes[17:20],  # a rollout's canary wave → cordoned, one upgrade queued (rollouts)
        "silent": [nodes[20], nodes[24]],  # no heartbeat for 10 min → heartbeat_lost, pulled (health)
    }
    for node in work["wiped"]:
        place(node, L.WIPING)
        _confirmed(node, "wipe")
        _stack(node)  # reported after the wipe began: what returns a wiped node to the pool
    for node in work["overdue"]:
        place(node, L.PROVISIONING, entered_ago=STATE_TIMEOUTS[L.PROVISIONING] + timedelta(minutes=1))
    for node in work["releasing"]:
        place(node, L.RELEASING)
    for node in work["bringing_up"]:
        place(node, L.BRINGING_UP)
        _stack(node)
    # Cordoned by an operator, so placement never takes them before the rollout does.
    canary_ids = [n.pk for n in work["canary"]]
    Node.objects.filter(pk__in=canary_ids).update(cordoned=True, cordon_reason="operator: held for the upgrade")
    node_type = work["canary"][0].node_type
    golden = golden_versions(node_type)
    newest = DRIVERS["blackwell-ultra"][-1]
    candidate = create_baseline(
        node_type=node_type,
        name="next",
        versions={**golden, "gpu_driver": newest, "cuda": CUDA_OF_DRIVER[newest.split(".")[0]]},
        actor="test",
    )
    create_rollout(baseline=candidate, actor="test", node_ids=canary_ids, canary_size=3, wave_size=3)
    silent_ids = [n.pk for n in work["silent"]]
    assert len({n.rack_id for n in work["silent"]}) == 2  # two racks: no correlated (rack) lapse
    Node.objects.filter(pk__in=silent_ids).update(
        last_heartbeat_at=now - timedelta(minutes=10), cordoned=True, cordon_reason="operator: looking"
    )
    tenant = work["tenant"] = Tenant.objects.create(slug="acme", name="Acme")
    work["type"] = node_type
    work["allocations"] = [
        Allocation.objects.create(tenant=tenant, name=f"job-{i}", instance_type=node_type, node_count=2)
        for i in range(6)
    ]
    # A rack over its usable kW for the last minutes (and the next few, should the minute turn).
    hot = nodes[-1].rack
    minute = now.replace(second=0, microsecond=0)
    PowerPoint.objects.bulk_create(
        PowerPoint(
            rack=hot,
            resolution="1m",
            at=minute + timedelta(minutes=m),
            kw=float(hot.usable_kw) + 10,
            kw_max=float(hot.usable_kw) + 10,
            source="estimate",
            nodes=2,
            measured_nodes=0,
        )
        for m in range(-6, 3)
    )
    work["hot_rack"] = hot
    return work


def _run_two_workers(tmp_path, work: dict) -> list[list[str]]:
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    (tmp_path / "var").mkdir()
    env = _env(tmp_path)
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(barrier), name, str(RUN_SECONDS)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ("worker-a", "worker-b")
    ]
    try:
        # Tenants keep asking while the loops run: placements race each other all along, not
        # only in the first passes.
        while barrier.exists() and len(list(barrier.iterdir())) < 2:
            time.sleep(0.01)
        for i in range(ARRIVALS):
            time.sleep(RUN_SECONDS / 2 / ARRIVALS)
            work["allocations"].append(
                Allocation.objects.create(
                    tenant=work["tenant"], name=f"late-{i}", instance_type=work["type"], node_count=1
                )
            )
        done = [worker.communicate(timeout=90) for worker in workers]
    finally:  # a worker left running would hold its locks through the test's flush
        for worker in workers:
            worker.kill()
            worker.wait()
    for worker, (_, stderr) in zip(workers, done, strict=True):
        assert worker.returncode == 0, stderr[-4000:]
    return [json.loads(stdout.strip().splitlines()[-1]) for stdout, _ in done]


def _skipped(summary: str) -> bool:
    """A pass that found the loop's advisory lock held by the other worker, as each loop says it."""
    return summary == "None" or summary.startswith("skipped") or "'skipped': True" in summary


def _passes(lines: list[list[str]]) -> dict[str, Counter]:
    out: dict[str, Counter] = {}
    for name, summary in lines:
        out.setdefault(name, Counter())["skipped" if _skipped(summary) else "ran"] += 1
    return out


def _duplicates(qs, *fields) -> list:
    return list(qs.values(*fields).annotate(n=Count("pk")).filter(n__gt=1))


@pytest.mark.django_db(transaction=False, databases=["default", "ledger"])
def test_the_workers_ledger_loop_has_a_partitioned_test_ledger():
    """The ledger-partition loop runs in the workers against the test ledger; this test also makes
    pytest-django create that database when this module runs alone."""
    assert "ensure_ledger_partitions" in {loop.name for loop in control_loops()}
    assert is_partitioned(connections["ledger"])


def test_two_workers_running_every_loop_act_on_nothing_twice(tmp_path):
    work = _seed()
    started = timezone.now()
    outputs = _run_two_workers(tmp_path, work)

    # Both really ran the loops, at the same time.
    loop_names = {loop.name for loop in control_loops()}
    passes = [_passes(lines) for lines in outputs]
    for mine in passes:
        assert set(mine) == loop_names
        assert sum(c["ran"] for c in mine.values()) > 0
    exclusive = {loop.name for loop in control_loops() if loop.exclusive}
    assert exclusive and exclusive != loop_names  # the outbox's loops run side by side instead
    for name in exclusive:  # every exclusive loop met a pass of the other worker holding its lock
        assert sum(mine[name]["skipped"] for mine in passes) > 0, f"{name}: the two workers never overlapped"
    for name in loop_names:
        runs = sum(mine[name]["ran"] + mine[name]["skipped"] for mine in passes)
        assert LoopRun.objects.get(name=name).runs == runs  # both recorded every pass

    # No node moved twice, no step recorded twice, no work item queued twice.
    events = NodeEvent.objects.filter(at__gte=started)
    assert not _duplicates(events, "node_id", "action", "from_state", "to_state")
    actions = NodeAgentAction.objects.filter(created_at__gte=started)
    assert not _duplicates(actions, "node_id", "action", "drive_id")
    audits = AuditEvent.objects.filter(at__gte=started)
    assert not _duplicates(audits.exclude(object_type="fleet.rollout"), "object_type", "object_id", "action")
    assert not _duplicates(audits.filter(object_type="fleet.rollout"), "object_id", "action", "after__node")

    # ... and every piece of work was done, once.
    def moved(nodes, from_state, to_state):
        return Counter(
            events.filter(node__in=nodes, from_state=from_state, to_state=to_state).values_list("node_id", flat=True)
        )

    assert moved(work["wiped"], L.WIPING, L.AVAILABLE) == Counter({n.pk: 1 for n in work["wiped"]})
    assert moved(work["overdue"], L.PROVISIONING, L.PROVISION_FAILED) == Counter({n.pk: 1 for n in work["overdue"]})
    assert Counter(actions.filter(node__in=work["releasing"], action="stop").values_list("node_id", flat=True)) == (
        Counter({n.pk: 1 for n in work["releasing"]})
    )
    assert moved(work["bringing_up"], L.BRINGING_UP, L.BURN_IN) == Counter({n.pk: 1 for n in work["bringing_up"]})
    assert actions.filter(node__in=work["bringing_up"], action="burn_in", state=AgentActionState.PENDING).count() == 3
    assert set(RolloutNode.objects.values_list("state", flat=True)) == {"upgrading"}
    assert actions.filter(node__in=work["canary"], action="upgrade").count() == 3

    # Every allocation placed once, on its own nodes.
    for allocation in work["allocations"]:
        allocation.refresh_from_db()
        assert allocation.state == "provisioning", allocation.failure_reason
        assert AllocationNode.objects.filter(allocation=allocation).count() == allocation.node_count
        assert audits.filter(object_id=str(allocation.pk), action="allocation.provisioning").count() == 1
    assert not _duplicates(AllocationNode.objects.filter(ended_at__isnull=True), "node_id")
    placed = AllocationNode.objects.values_list("node_id", flat=True)
    assert Counter(actions.filter(node__in=placed, action="provision").values_list("node_id", flat=True)) == (
        Counter({pk: 1 for pk in placed})
    )

    # One condition, one raise and one incident per silent node; the node pulled once.
    for node in work["silent"]:
        assert Condition.objects.filter(node=node, signal="heartbeat_lost").count() == 1
        assert ConditionEvent.objects.filter(node=node, signal="heartbeat_lost", kind="raised").count() == 1
        assert Incident.objects.filter(nodes=node).count() == 1
        assert moved([node], L.AVAILABLE, L.QUARANTINED) == Counter({node.pk: 1})
    # One rack-power condition and one incident for the hot rack; one point a minute per rack.
    assert RackPowerCondition.objects.filter(rack=work["hot_rack"]).count() == 1
    assert Incident.objects.filter(signals__contains=["rack_over_power"]).count() == 1
    assert not _duplicates(PowerPoint.objects.all(), "rack_id", "resolution", "at")
    assert PowerPoint.objects.filter(at__gte=started - timedelta(minutes=1), resolution="1m").exists()
