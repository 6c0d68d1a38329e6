"""Energy benchmark on the 12,500-node fixture: the monthly energy roll-up per allocation for the
whole fleet (50 tenants × 250 nodes, one allocation each, October 2026 = 744 hours), against one
raw-SQL statement summing the same rows.

History as the heartbeat path leaves it: every node has its month roll-up row
(fleet.NodeEnergyMonth); 5 nodes per tenant (2 %) joined their allocation mid-month, so that
month is partial and read from their hourly rows (250 nodes × 744 hours = 186,000 rows). The
other 12,250 nodes' hourly rows are not inserted: a whole month never reads them (the 9 M-row
insert did not finish inside the run limit on the shared box), which is the point of the roll-up.
"""

from datetime import UTC, datetime, timedelta

from django.db import connection

from benchmarks.harness import Measurement, benchmark, count_queries, timed
from fleet.models import Node, NodeEnergyHour, NodeEnergyMonth
from tenants.energy import allocation_energy
from tenants.models import Allocation, AllocationNode
from tenants.services.tenants import create_tenant

TENANTS = 50
PARTIAL_PER_TENANT = 5
MONTH_START = datetime(2026, 10, 1, tzinfo=UTC)
MONTH_END = datetime(2026, 11, 1, tzinfo=UTC)
HOURS = int((MONTH_END - MONTH_START) / timedelta(hours=1))
JOINED_AT = MONTH_START + timedelta(days=14, hours=10, minutes=30)  # mid-month, inside an hour
WATTS = 8000  # every node at 8 kW


def _setup() -> tuple[list, int]:
    """Tenants, memberships and history; returns the tenant ids and the expected IT kWh."""
    nodes = list(Node.objects.order_by("hostname").values_list("id", "node_type_id"))
    per_tenant = len(nodes) // TENANTS
    tenant_ids, memberships, partial_nodes = [], [], []
    for t in range(TENANTS):
        tenant, _ = create_tenant(slug=f"bench-energy-{t}", name=f"Bench {t}", max_nodes=100_000, actor="bench")
        tenant_ids.append(tenant.pk)
        chunk = nodes[t * per_tenant : (t + 1) * per_tenant]
        allocation = Allocation.objects.create(
            tenant=tenant, name=f"train-{t}", instance_type_id=chunk[0][1], node_count=len(chunk), state="active"
        )
        for i, (node_id, _) in enumerate(chunk):
            joined = JOINED_AT if i < PARTIAL_PER_TENANT else MONTH_START - timedelta(days=3)
            memberships.append(AllocationNode(allocation=allocation, node_id=node_id, started_at=joined))
            if i < PARTIAL_PER_TENANT:
                partial_nodes.append(node_id)
    AllocationNode.objects.bulk_create(memberships, batch_size=5000)
    NodeEnergyMonth.objects.bulk_create(
        (
            NodeEnergyMonth(
                node_id=node_id,
                month=MONTH_START.date(),
                source="bmc",
                it_energy_j=WATTS * 3600 * HOURS,
                gpu_energy_j=WATTS * 1800 * HOURS,
                seconds=3600 * HOURS,
            )
            for node_id, _ in nodes
        ),
        batch_size=5000,
    )
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {NodeEnergyHour._meta.db_table} (node_id, hour, source, it_energy_j, gpu_energy_j, seconds) "
            f"SELECT n.id, h, 'bmc', %s, %s, 3600 FROM {Node._meta.db_table} n, "
            "generate_series(%s::timestamptz, %s::timestamptz - interval '1 hour', interval '1 hour') h "
            "WHERE n.id = ANY(%s)",
            [WATTS * 3600, WATTS * 1800, MONTH_START, MONTH_END, partial_nodes],
        )
        cursor.execute("ANALYZE")
    whole = (per_tenant - PARTIAL_PER_TENANT) * TENANTS * HOURS * WATTS / 1000
    partial = len(partial_nodes) * (MONTH_END - JOINED_AT).total_seconds() / 3600 * WATTS / 1000
    return tenant_ids, round(whole + partial)


BASELINE_SQL = """
SELECT m.allocation_id, SUM(e.it_energy_j)
FROM fleet_nodeenergymonth e
JOIN tenants_allocationnode m ON m.node_id = e.node_id AND m.started_at <= %(start)s
     AND (m.ended_at IS NULL OR m.ended_at >= %(end)s)
WHERE e.month = %(month)s
GROUP BY m.allocation_id
UNION ALL
SELECT m.allocation_id, SUM(e.it_energy_j * LEAST(1, GREATEST(0,
       EXTRACT(EPOCH FROM (LEAST(e.hour + INTERVAL '1 hour', COALESCE(m.ended_at, e.hour + INTERVAL '1 hour'))
                           - GREATEST(e.hour, m.started_at))) / 3600)))
FROM fleet_nodeenergyhour e
JOIN tenants_allocationnode m ON m.node_id = e.node_id AND m.started_at > %(start)s
     AND e.hour >= date_trunc('hour', m.started_at)
WHERE e.hour >= %(start)s AND e.hour < %(end)s
GROUP BY m.allocation_id
"""


@benchmark(
    "energy: monthly roll-up per allocation, 12,500 nodes × 744 h (month roll-up + 2 % partial)", target="≤ 10 s"
)
def monthly_rollup() -> Measurement:
    if connection.vendor != "postgresql":
        return Measurement(ours_s=0.0, note="PostgreSQL only (the fixture uses generate_series)")
    tenant_ids, expected_kwh = _setup()
    rows: list = []

    def ours():
        rows.clear()
        for tenant_id in tenant_ids:
            rows.extend(allocation_energy(tenant_id=tenant_id, start=MONTH_START, end=MONTH_END))

    ours_s = timed(ours, repeat=3)
    total = sum(r.it_kwh for r in rows)
    assert round(total) == expected_kwh, (total, expected_kwh)
    queries = count_queries(ours)

    def baseline():
        with connection.cursor() as cursor:
            cursor.execute(BASELINE_SQL, {"start": MONTH_START, "end": MONTH_END, "month": MONTH_START.date()})
            cursor.fetchall()

    baseline_s = timed(baseline, repeat=3)
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
