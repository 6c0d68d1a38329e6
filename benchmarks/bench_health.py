"""Health benchmarks on the 12,500-node fixture (the sweep on the 125,000-node one too): the sweep with 10 conditions per node, and
heartbeat ingest through the real endpoint. Each runs inside a transaction that is rolled
back, so the shared fixture is left as it was."""

import json
import time
from datetime import timedelta

from django.db import connection, transaction
from django.test import Client
from django.utils import timezone

from benchmarks.fixtures import LARGE
from benchmarks.harness import Measurement, benchmark, count_queries, timed
from core.api.agent_tokens import mint_agent_token
from fleet.models import Node
from health.models import Condition
from health.services.sweep import run_health_sweep

# 10 signals per node: info and warn ones everywhere, and a reboot-class XID on 1 % of nodes
# so the first sweep has real pulls to make.
BACKGROUND = [(g, "ecc_sbe", "info") for g in range(8)] + [(0, "xid_13", "info"), (1, "thermal_throttle", "warn")]
PULLED_EVERY = 100
HEARTBEATS = 2000


def _conditions(node_ids, now) -> list[Condition]:
    rows = []
    for i, node_id in enumerate(node_ids):
        signals = list(BACKGROUND)
        if i % PULLED_EVERY == 0:
            signals[8] = (0, "xid_79", "reboot")
        rows += [
            Condition(node_id=node_id, gpu_index=g, signal=s, severity=sev, first_seen=now, last_seen=now)
            for g, s, sev in signals
        ]
    return rows


@benchmark("health sweep (12,500 nodes × 10 conditions)", target="≤ 2 s, queries fixed")
def health_sweep() -> Measurement:
    return _health_sweep()


@benchmark("health sweep (125,000 nodes × 10 conditions)", fixture=LARGE, target="≤ 5 s, the same queries")
def health_sweep_125k() -> Measurement:
    return _health_sweep()


def _health_sweep() -> Measurement:
    with transaction.atomic():
        now = timezone.now()
        node_ids = list(Node.objects.values_list("pk", flat=True))
        Node.objects.update(last_heartbeat_at=now)
        Condition.objects.bulk_create(_conditions(node_ids, now), batch_size=5000)
        with connection.cursor() as cursor:
            # Autovacuum keeps a live table's statistics; rows bulk-loaded inside this
            # transaction are invisible to it, and a planner that believes the conditions table
            # empty picks nested loops that take minutes at 125,000 nodes.
            cursor.execute("ANALYZE health_condition")
        later = now + timedelta(seconds=5)
        started = time.perf_counter()
        first = run_health_sweep(now=later)
        first_s = time.perf_counter() - started
        queries = count_queries(lambda: run_health_sweep(now=later))
        ours = timed(lambda: run_health_sweep(now=later), repeat=3)
        with connection.cursor() as cursor:
            sql = "SELECT node_id, max(severity) FROM health_condition WHERE status = 'active' GROUP BY node_id"
            baseline = timed(lambda: (cursor.execute(sql), cursor.fetchall()), repeat=3)
        transaction.set_rollback(True)
    return Measurement(
        ours,
        baseline,
        queries,
        note=f"{len(node_ids)} nodes, {len(node_ids) * 10} conditions; steady-state sweep; the first "
        f"sweep pulled {first.get('pulled')} nodes in {first_s:.2f} s; baseline = one GROUP BY "
        "over active conditions",
    )


@benchmark("heartbeat ingest (real endpoint, 8 GPUs each)", target="≥ 1,000 heartbeats/s")
def heartbeat_ingest() -> Measurement:
    with transaction.atomic():
        node_ids = list(Node.objects.values_list("pk", flat=True)[:HEARTBEATS])
        client = Client()
        gpus = [
            {
                "index": i,
                "uuid": f"GPU-{i}",
                "temperature_c": 60,
                "power_w": 500,
                "utilization_pct": 90,
                "memory_used_mb": 70000,
                "ecc_sbe": 0,
                "ecc_dbe": 0,
                "retired_pages": 0,
                "row_remap_pending": 0,
                "row_remap_failed": 0,
                "xid_errors": [],
                "nvlink_down": 0,
            }
            for i in range(8)
        ]
        body = json.dumps(
            {"observed_at": "2026-11-02T10:00:00Z", "power_state": "on", "agent_version": "bench", "gpus": gpus}
        )
        headers = [{"HTTP_AUTHORIZATION": f"Bearer {mint_agent_token(n)}"} for n in node_ids]

        def send_all():
            for h in headers:
                response = client.post("/api/agent/v1/heartbeat", body, content_type="application/json", **h)
                assert response.status_code == 202, response.content

        send_all()  # warm the per-process GPU-count cache, as a running server has
        queries = count_queries(
            lambda: client.post("/api/agent/v1/heartbeat", body, content_type="application/json", **headers[0])
        )
        ours = timed(send_all)
        with connection.cursor() as cursor:
            table = Node._meta.db_table
            baseline = timed(
                lambda: [
                    cursor.execute(
                        f"UPDATE {table} SET last_heartbeat_at = %s WHERE id = %s",
                        [timezone.now(), str(n).replace("-", "") if connection.vendor == "sqlite" else n],
                    )
                    for n in node_ids
                ]
            )
        transaction.set_rollback(True)
    rate = len(node_ids) / ours
    return Measurement(
        ours,
        baseline,
        queries,
        note=f"{rate:,.0f} heartbeats/s ({len(node_ids)} in {ours:.2f} s, in-process test Client); "
        "queries per heartbeat shown; baseline = one raw UPDATE per heartbeat",
    )
