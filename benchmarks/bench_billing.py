"""Billing benchmarks: meter ingest through the endpoint, and a month's billing run.

Targets (issue #6, PostgreSQL): ingest ≥ 20,000 events/s in batches of 1,000 and ≤ 3× raw
executemany of the same rows; a billing run over 5,000,000 events / 1,000 tenants ≤ 10 s
and ≤ 1.5× one raw-SQL aggregate. Sizes: BENCH_METER_EVENTS (default 50,000) and
BENCH_BILLING_EVENTS (default 500,000 on SQLite, 5,000,000 on PostgreSQL).
"""

import json
import os
import time
import uuid
from datetime import UTC, date, datetime, timedelta

from django.db import connections, transaction
from django.test import Client

from benchmarks.harness import Measurement, benchmark
from billing.grants import MeteringGrant, sign_grant
from billing.services.ledger_partitions import ensure_partitions_for
from billing.services.runs import run_billing
from core.api.agent_tokens import mint_agent_token

LEDGER = "ledger"
PERIOD = date(2026, 9, 1)
T0 = datetime(2026, 9, 1, tzinfo=UTC)
COLUMNS = (
    "event_id",
    "part",
    "tenant_id",
    "allocation_id",
    "node_id",
    "sku",
    "start",
    "end",
    "period",
    "quantity_micro",
    "unit",
    "payload_hash",
    "received_at",
)
COLUMN_LIST = ", ".join(f'"{c}"' for c in COLUMNS)


def _event(i: int, tenant: uuid.UUID, start0: datetime, grant: str) -> dict:
    start = start0 + timedelta(minutes=i % 1000)
    return {
        "event_id": f"{tenant.hex[:8]}-{i}",  # new ids each run, so a reused fixture takes them
        "allocation_id": str(tenant),
        "tenant_id": str(tenant),
        "sku": "h100-sxm-8x",
        "start": start.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "end": (start + timedelta(seconds=60)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "quantity": "480",
        "unit": "gpu_second",
        "grant": grant,
    }


def _row(
    i: int, tenant: str, node: str, vendor: str, prefix: str = "bench", t0: datetime = T0, spread: int = 40_000
) -> tuple:
    start = t0 + timedelta(minutes=i % spread)
    end = start + timedelta(seconds=60)
    period = date(start.year, start.month, 1).isoformat()
    if vendor == "sqlite":  # Django's SQLite storage format
        start, end = start.strftime("%Y-%m-%d %H:%M:%S"), end.strftime("%Y-%m-%d %H:%M:%S")
    # Each tenant's usage is its one allocation (id = the tenant's) on one node, as allocated.
    return (
        f"{prefix}-{i}",
        0,
        tenant,
        tenant,
        node,
        "h100-sxm-8x",
        start,
        end,
        period,
        480_000_000,
        "gpu_second",
        "0" * 64,
        start,
    )


def _insert_sql(table: str) -> str:
    return f"INSERT INTO {table} ({COLUMN_LIST}) VALUES ({', '.join(['%s'] * len(COLUMNS))})"


@benchmark(
    "meter ingest via POST /meter-events (batches of 1,000)",
    fixture="empty",
    target=">= 20,000 events/s, <= 3x executemany",
)
def meter_ingest() -> Measurement:
    total = int(os.environ.get("BENCH_METER_EVENTS", 50_000))
    ours, baseline = measure_meter_ingest(total)
    return Measurement(
        ours,
        baseline,
        note=f"{total} events: {total / ours:,.0f} events/s through the endpoint, "
        f"{total / baseline:,.0f} rows/s raw executemany",
    )


def measure_meter_ingest(total: int) -> tuple[float, float]:
    """(ours, raw) seconds: `total` new events through the endpoint in batches of 1,000, and the
    same rows (new ids) by raw executemany into the same table."""
    tenant, node = uuid.uuid4(), uuid.uuid4()
    # Recent minutes (ingest refuses stale or future usage), all under the node's one grant.
    start0 = (datetime.now(UTC) - timedelta(hours=20)).replace(second=0, microsecond=0)
    grant = sign_grant(
        MeteringGrant(
            node_id=node,
            tenant_id=tenant,
            allocation_id=tenant,
            sku="h100-sxm-8x",
            gpus=8,
            valid_from=start0,
            valid_until=start0 + timedelta(hours=20),
        )
    )
    events = [_event(i, tenant, start0, grant) for i in range(total)]
    # Bodies are encoded up front: what the agent spends serialising is not the server's time.
    bodies = [json.dumps({"events": events[i : i + 1000]}) for i in range(0, total, 1000)]
    client = Client()
    auth = f"Bearer {mint_agent_token(node)}"
    warm_up = json.dumps({"events": [{**_event(0, tenant, start0, grant), "event_id": f"warm-up-{tenant}"}]})
    client.post("/api/agent/v1/meter-events", warm_up, content_type="application/json", HTTP_AUTHORIZATION=auth)
    started = time.perf_counter()
    for body in bodies:
        response = client.post(
            "/api/agent/v1/meter-events", body, content_type="application/json", HTTP_AUTHORIZATION=auth
        )
        assert response.status_code == 202 and response.json()["accepted"] == 1000, response.content
    ours = time.perf_counter() - started
    connection = connections[LEDGER]
    vendor = connection.vendor
    # Baseline: the same rows (new ids) into the same table and indexes, one transaction per
    # 1,000 like the endpoint, by raw executemany: the database's own cost.
    key = (lambda u: u.hex) if vendor == "sqlite" else str
    # The same minutes as the endpoint's events, so both land in the same month's partition.
    rows = [
        _row(i, key(tenant), key(node), vendor, prefix=f"raw-{tenant.hex[:8]}", t0=start0, spread=1000)
        for i in range(total)
    ]
    started = time.perf_counter()
    for i in range(0, total, 1000):
        with transaction.atomic(using=LEDGER), connection.cursor() as cursor:
            cursor.executemany(_insert_sql("billing_usageevent"), rows[i : i + 1000])
    baseline = time.perf_counter() - started
    return ours, baseline


def allocation_history(tenant_ids: list[uuid.UUID], start: datetime = T0, end: datetime | None = None) -> uuid.UUID:
    """What the control plane would hold for this usage: each tenant's allocation (id = the
    tenant's) on one node from `start` to `end` (all of September by default), so the run's
    reconciliation finds nothing."""
    end = end or T0 + timedelta(days=30)
    from devtools.services.fleet_seed import seed_fleet
    from fleet.models import Node, NodeType
    from tenants.models import Allocation, AllocationNode, Tenant

    node = Node.objects.order_by("hostname").first()
    if node is None:
        seed_fleet(gpus=8, site_slug="bench")
        node = Node.objects.order_by("hostname").first()
    node_type = NodeType.objects.get(slug="h100-sxm-8x")
    Tenant.objects.bulk_create([Tenant(pk=t, slug=f"bench-{t.hex}", name="bench") for t in tenant_ids])
    Allocation.objects.bulk_create(
        [
            Allocation(pk=t, tenant_id=t, name="bench", instance_type=node_type, node_count=1, state="released")
            for t in tenant_ids
        ]
    )
    AllocationNode.objects.bulk_create(
        [AllocationNode(allocation_id=t, node=node, started_at=start, ended_at=end) for t in tenant_ids]
    )
    return node.pk


def _load_usage(total: int, tenants: int) -> None:
    """Bulk-load `total` September events over `tenants` tenants (COPY on PostgreSQL), with the
    allocation history they come from."""
    connection = connections[LEDGER]
    vendor = connection.vendor
    ensure_partitions_for({PERIOD})
    tenant_ids = [uuid.uuid4() for _ in range(tenants)]
    node_id = allocation_history(tenant_ids)
    tenant_keys = [t.hex if vendor == "sqlite" else str(t) for t in tenant_ids]
    node_key = node_id.hex if vendor == "sqlite" else str(node_id)
    chunk = 100_000
    with transaction.atomic(using=LEDGER), connection.cursor() as cursor:
        for lo in range(0, total, chunk):
            rows = [_row(i, tenant_keys[i % tenants], node_key, vendor) for i in range(lo, min(total, lo + chunk))]
            if vendor == "postgresql":
                with cursor.cursor.copy(f"COPY billing_usageevent ({COLUMN_LIST}) FROM STDIN") as copy:
                    for row in rows:
                        copy.write_row(row)
            else:
                cursor.executemany(_insert_sql("billing_usageevent"), rows)


@benchmark(
    "billing run for one month (N events, 1,000 tenants)",
    fixture="empty",
    target="5M events <= 10 s, <= 1.5x raw aggregate (PostgreSQL)",
)
def billing_run() -> Measurement:
    vendor = connections[LEDGER].vendor
    total = int(os.environ.get("BENCH_BILLING_EVENTS", 5_000_000 if vendor == "postgresql" else 500_000))
    _load_usage(total, tenants=1000)
    with connections[LEDGER].cursor() as cursor:
        cursor.execute("ANALYZE")
    sql = (
        "SELECT tenant_id, sku, period, SUM(quantity_micro) FROM billing_usageevent "
        "WHERE period = %s AND id <= %s GROUP BY tenant_id, sku, period"
    )
    params = [PERIOD.isoformat() if vendor == "sqlite" else PERIOD, 10**12]
    with connections[LEDGER].cursor() as cursor:
        cursor.execute(sql, params)  # warm the cache once, so neither side is timed cold
        cursor.fetchall()
    started = time.perf_counter()
    outcome = run_billing(period=PERIOD, finalize=False, actor="bench")
    ours = time.perf_counter() - started
    assert outcome.run.invoices >= 1000  # other benchmarks may have billed a tenant in this period too
    with connections[LEDGER].cursor() as cursor:
        started = time.perf_counter()
        cursor.execute(sql, params)
        cursor.fetchall()
        baseline = time.perf_counter() - started
    return Measurement(
        ours,
        baseline,
        note=f"{total:,} events, {outcome.run.invoices} invoices; baseline = the "
        "GROUP BY alone (ours adds reconciliation against the allocation "
        "history, pricing, invoices, lines, run row)",
    )


@benchmark(
    "billing verifier over one month (N events, 1,000 tenants) vs the billing run",
    fixture="empty",
    target="5M events: verifier <= 2x the billing run's own time (PostgreSQL)",
)
def billing_verifier() -> Measurement:
    """The independent verifier (billing.verifier) recomputing the invoices a finalizing run just
    wrote, against that run's own time; the raw GROUP BY of the month is in the note."""
    from billing.verifier import verify_billing

    vendor = connections[LEDGER].vendor
    total = int(os.environ.get("BENCH_BILLING_EVENTS", 5_000_000 if vendor == "postgresql" else 500_000))
    _load_usage(total, tenants=1000)
    with connections[LEDGER].cursor() as cursor:
        cursor.execute("ANALYZE")
    sql = (
        "SELECT tenant_id, sku, period, SUM(quantity_micro) FROM billing_usageevent "
        "WHERE period = %s AND id <= %s GROUP BY tenant_id, sku, period"
    )
    params = [PERIOD.isoformat() if vendor == "sqlite" else PERIOD, 10**12]
    with connections[LEDGER].cursor() as cursor:
        cursor.execute(sql, params)  # warm the cache once, so no side is timed cold
        cursor.fetchall()
        started = time.perf_counter()
        cursor.execute(sql, params)
        cursor.fetchall()
        raw = time.perf_counter() - started
    started = time.perf_counter()
    outcome = run_billing(period=PERIOD, finalize=True, actor="bench", now=datetime(2026, 12, 1, tzinfo=UTC))
    run_s = time.perf_counter() - started
    started = time.perf_counter()
    report = verify_billing()
    ours = time.perf_counter() - started
    assert report.ok, report.differences[:5]
    assert report.invoices >= 1000
    return Measurement(
        ours,
        run_s,
        note=f"{total:,} events, {report.invoices} invoices recomputed, {report.usage_rows:,} rows read; "
        f"baseline = the finalizing billing run of the same month ({outcome.run.invoices} invoices); "
        f"raw GROUP BY of the month {raw:.2f} s",
    )
