"""Energy benchmark on the 12,500-node fixture: the monthly energy roll-up per allocation for the
whole fleet (50 tenants × 250 nodes, one allocation each, a full 720-hour month of hourly energy
= 9 million NodeEnergyHour rows), against one raw-SQL statement summing the same rows."""

from datetime import UTC, datetime, timedelta

from django.db import connection

from benchmarks.harness import Measurement, benchmark, count_queries, timed
from fleet.models import Node, NodeEnergyHour
from tenants.energy import allocation_energy
from tenants.models import Allocation, AllocationNode
from tenants.services.tenants import create_tenant

TENANTS = 50
MONTH_START = datetime(2026, 10, 1, tzinfo=UTC)
MONTH_END = datetime(2026, 11, 1, tzinfo=UTC)
JOULES_PER_HOUR = 8000 * 3600  # every node at 8 kW


def _setup() -> list:
    nodes = list(Node.objects.order_by("hostname").values_list("id", "node_type_id"))
    per_tenant = len(nodes) // TENANTS
    tenant_ids = []
    memberships = []
    for t in range(TENANTS):
        tenant, _ = create_tenant(slug=f"bench-energy-{t}", name=f"Bench {t}", max_nodes=100_000, actor="bench")
        tenant_ids.append(tenant.pk)
        chunk = nodes[t * per_tenant : (t + 1) * per_tenant]
        allocation = Allocation.objects.create(
            tenant=tenant, name=f"train-{t}", instance_type_id=chunk[0][1], node_count=len(chunk), state="active"
        )
        memberships += [
            AllocationNode(allocation=allocation, node_id=node_id, started_at=MONTH_START - timedelta(days=3))
            for node_id, _ in chunk
        ]
    AllocationNode.objects.bulk_create(memberships, batch_size=5000)
    table = NodeEnergyHour._meta.db_table
    hour = MONTH_START
    with connection.cursor() as cursor:
        while hour < MONTH_END:
            cursor.execute(
                f"INSERT INTO {table} (node_id, hour, source, it_energy_j, gpu_energy_j, seconds) "
                f"SELECT id, %s, 'bmc', %s, %s, 3600 FROM {Node._meta.db_table}",
                [hour, JOULES_PER_HOUR, JOULES_PER_HOUR // 2],
            )
            hour += timedelta(hours=1)
        if connection.vendor == "postgresql":
            cursor.execute("ANALYZE")
    return tenant_ids


BASELINE_SQL = """
SELECT m.allocation_id, SUM(e.it_energy_j)
FROM fleet_nodeenergyhour e
JOIN tenants_allocationnode m ON m.node_id = e.node_id AND m.started_at <= e.hour
     AND (m.ended_at IS NULL OR m.ended_at >= e.hour + INTERVAL '1 hour')
WHERE e.hour >= %s AND e.hour < %s
GROUP BY m.allocation_id
"""


@benchmark("energy: monthly roll-up per allocation, 12,500 nodes × 720 h (9 M hourly rows)", target="≤ 10 s")
def monthly_rollup() -> Measurement:
    tenant_ids = _setup()
    rows: list = []

    def ours():
        rows.clear()
        for tenant_id in tenant_ids:
            rows.extend(allocation_energy(tenant_id=tenant_id, start=MONTH_START, end=MONTH_END))

    ours_s = timed(ours, repeat=2)
    expected_kwh = Node.objects.count() // TENANTS * TENANTS * 720 * 8
    total = sum(r.it_kwh for r in rows)
    assert int(total) == expected_kwh, (total, expected_kwh)
    queries = count_queries(ours)
    baseline_s = None
    if connection.vendor == "postgresql":

        def baseline():
            with connection.cursor() as cursor:
                cursor.execute(BASELINE_SQL, [MONTH_START, MONTH_END])
                cursor.fetchall()

        baseline_s = timed(baseline, repeat=2)
    return Measurement(
        ours_s=ours_s,
        baseline_s=baseline_s,
        queries=queries,
        note=f"{TENANTS} tenants' usage reads; {total:,.0f} kWh IT, checked against the fixture",
    )


def _bytes_per_row(model) -> float | None:
    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE " + model._meta.db_table)
        cursor.execute(
            "SELECT pg_total_relation_size(%s), (SELECT COUNT(*) FROM " + model._meta.db_table + ")",
            [model._meta.db_table],
        )
        size, rows = cursor.fetchone()
    return size / rows if rows else None


@benchmark(
    "power history: one minute's points for every rack (12,500 nodes), then an hour downsampled",
    target="minute ≤ 5 s (the task runs every 60 s)",
)
def power_history_minute() -> Measurement:
    from fleet.models import PowerPoint
    from fleet.services.power_history import downsample, record_minute

    hour = datetime(2026, 11, 2, 10, tzinfo=UTC)
    minute_s = timed(lambda: record_minute(now=hour), repeat=1)
    racks = PowerPoint.objects.filter(resolution="1m").count()
    # the rest of the hour, written directly (the same rows record_minute writes)
    table = PowerPoint._meta.db_table
    with connection.cursor() as cursor:
        for m in range(1, 60):
            cursor.execute(
                f"INSERT INTO {table} (rack_id, resolution, at, kw, kw_max, source, nodes, measured_nodes) "
                f"SELECT rack_id, '1m', %s, kw, kw_max, source, nodes, measured_nodes FROM {table} "
                f"WHERE resolution = '1m' AND at = %s",
                [hour + timedelta(minutes=m), hour],
            )
    down_s = timed(lambda: downsample(now=hour + timedelta(hours=1, minutes=1)), repeat=1)
    per_row = _bytes_per_row(PowerPoint)
    energy_row = _bytes_per_row(NodeEnergyHour)
    note = (
        f"{racks:,} racks; minute {minute_s * 1000:.0f} ms, downsample {down_s * 1000:.0f} ms; "
        f"PowerPoint {per_row:.0f} B/row incl. indexes"
        if per_row
        else f"{racks:,} racks"
    )
    if energy_row:
        note += f"; NodeEnergyHour {energy_row:.0f} B/row incl. indexes"
    return Measurement(ours_s=minute_s + down_s, note=note)
