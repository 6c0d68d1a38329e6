"""The partitioned ledger at 50,000,000 events / 10,000 tenants (issue #18), PostgreSQL only.

The fixture (`ledger50m`, its rows run alone: `python -m benchmarks --only "ledger at"`) loads
BENCH_LEDGER_EVENTS (default 50,000,000) usage rows over the twelve months October 2025 –
September 2026, spread evenly over 10,000 tenants each with an allocation for the whole year,
by INSERT … SELECT generate_series into the real partitioned table (same indexes, triggers and
sequence as production). Rows:

- a finalizing-equivalent billing run of September (one month's partition, ~4.2 M rows) against
  the raw aggregate of that month — target ≤ 30 s and ≤ 1.5×;
- meter ingest through the endpoint into that ledger (each batch's event ids are looked up in
  every attached month) against raw executemany of the same rows;
- archiving a closed month (detach into the archive schema) against a bare DETACH of another;
- storage per million events, in the billing row's note.
"""

import os
import time
import uuid
from datetime import date

from django.db import connections, transaction

from benchmarks.bench_billing import COLUMN_LIST, allocation_history, measure_meter_ingest
from benchmarks.harness import Measurement, benchmark
from billing.partitions import attached_partitions, partition_name
from billing.periods import next_period, period_start
from billing.services.ledger_partitions import archive_month, ensure_partitions_for
from billing.services.runs import run_billing

LEDGER = "ledger"
FIXTURE = "ledger50m"  # benchmarks.fixtures.LEDGER_50M
FIRST, BILLED = date(2025, 10, 1), date(2026, 9, 1)
TENANTS = 10_000
CHUNK = 1_000_000
_state: dict = {}


def _months() -> list[date]:
    months, month = [], FIRST
    while month <= BILLED:
        months.append(month)
        month = next_period(month)
    return months


def load() -> None:
    """The fixture: tenants with a year's allocation, then the usage, month by month."""
    connection = connections[LEDGER]
    if connection.vendor != "postgresql":
        raise RuntimeError("the ledger-at-scale rows are PostgreSQL's (the ledger is partitioned there)")
    total = int(os.environ.get("BENCH_LEDGER_EVENTS", 50_000_000))
    months = _months()
    if BILLED in attached_partitions(connection):
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT count(*) FROM {partition_name(BILLED)}")
            loaded = cursor.fetchone()[0]
        if loaded:  # BENCH_REUSE_DATABASE: the last run's fixture
            print(f"  ledger fixture: reusing {loaded:,} rows a month", flush=True)
            _measure_storage(connection, loaded * len(months), loaded)
            return
    tenant_ids = [uuid.UUID(int=(7 << 64) + i) for i in range(TENANTS)]
    node_id = allocation_history(tenant_ids, start=period_start(FIRST), end=period_start(next_period(BILLED)))
    ensure_partitions_for(set(months))
    per_month = total // len(months)
    started = time.monotonic()
    for m, month in enumerate(months):
        minutes = 28 * 24 * 60  # every row well inside its month, whatever its length
        for lo in range(0, per_month, CHUNK):
            hi = min(per_month, lo + CHUNK)
            with transaction.atomic(using=LEDGER), connection.cursor() as cursor:
                # Tenant i's rows are g ≡ i (mod 10,000); one minute each, spread over the month.
                cursor.execute(
                    f"INSERT INTO billing_usageevent ({COLUMN_LIST}) "
                    "SELECT 'L' || %s || '-' || g, 0, t, t, %s::uuid, 'h100-sxm-8x', ts, ts + interval '60 s', "
                    "%s::date, 480000000, 'gpu_second', repeat('0', 64), ts "
                    "FROM generate_series(%s::bigint, %s::bigint) g, LATERAL (SELECT "
                    "('00000000-0000-0007-0000-' || lpad(to_hex(g %% %s), 12, '0'))::uuid AS t, "
                    "%s::timestamptz + ((g / %s) %% %s) * interval '1 minute' AS ts) x",
                    [m, str(node_id), month, lo, hi - 1, TENANTS, period_start(month), TENANTS, minutes],
                )
        print(
            f"  ledger fixture: {month:%Y-%m} loaded ({(m + 1) * per_month:,} rows, {time.monotonic() - started:.0f} s)",
            flush=True,
        )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE billing_usageevent")
    _measure_storage(connection, per_month * len(months), per_month)


def _measure_storage(connection, rows: int, per_month: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT sum(pg_total_relation_size(inhrelid)) FROM pg_inherits WHERE inhparent = 'billing_usageevent'::regclass"
        )
        _state["bytes"] = int(cursor.fetchone()[0])
    _state["rows"], _state["per_month"] = rows, per_month


def _aggregate_sql() -> tuple[str, list]:
    return (
        "SELECT tenant_id, sku, period, SUM(quantity_micro) FROM billing_usageevent "
        "WHERE period = %s AND id <= %s GROUP BY tenant_id, sku, period",
        [BILLED, 10**15],
    )


# The same work in SQL: the month's aggregate, one draft invoice per tenant and its line, with
# the same tables, indexes and triggers (rolled back). The rating rules (price versions, splits,
# half-even rounding, late usage, credits, energy) are what ours adds on top.
RAW_RUN = (
    "CREATE TEMP TABLE bench_rated ON COMMIT DROP AS SELECT tenant_id, sku, SUM(quantity_micro) AS q, "
    'min(start) AS s, max("end") AS e FROM billing_usageevent WHERE period = %(p)s AND id <= %(w)s '
    "GROUP BY tenant_id, sku",
    "INSERT INTO billing_invoice (id, tenant_id, period, issuer, status, currency, total, created_at, updated_at, "
    "void_reason, voided_by) SELECT gen_random_uuid(), tenant_id, %(scratch)s, '', 'draft', 'USD', "
    "round(sum(q) / 3600e6 * 2.35, 2), now(), now(), '', '' FROM bench_rated GROUP BY tenant_id",
    "INSERT INTO billing_invoiceline (id, position, kind, sku, description, usage_period, quantity, unit, "
    'unit_price, amount, reference, invoice_id, "end", note, price_version, quantity_micro, rate, start) '
    "SELECT gen_random_uuid(), 1, 'usage', r.sku, 'GPU-hours', %(p)s, r.q / 3600e6, 'gpu_hour', 2.35, "
    "round(r.q / 3600e6 * 2.35, 2), '', i.id, r.e, '', 1, r.q, 1, r.s FROM bench_rated r "
    "JOIN billing_invoice i ON i.tenant_id = r.tenant_id AND i.period = %(scratch)s AND i.status = 'draft'",
)


def _raw_run() -> float:
    started = time.perf_counter()
    with transaction.atomic(using=LEDGER), connections[LEDGER].cursor() as cursor:
        for statement in RAW_RUN:
            # Invoices under a month no run uses, so drafts already written never collide.
            cursor.execute(statement, {"p": BILLED, "w": 10**15, "scratch": date(1970, 1, 1)})
        transaction.set_rollback(True, using=LEDGER)
    return time.perf_counter() - started


@benchmark(
    "ledger at 50M events: billing run of one month (10,000 tenants)",
    fixture=FIXTURE,
    target="≤ 30 s, ≤ 1.5× raw SQL",
)
def ledger_billing_run() -> Measurement:
    sql, params = _aggregate_sql()
    with connections[LEDGER].cursor() as cursor:
        cursor.execute(sql, params)  # warm the month's pages once, for both sides
        cursor.fetchall()
        started = time.perf_counter()
        cursor.execute(sql, params)
        assert len(cursor.fetchall()) == TENANTS
        aggregate = time.perf_counter() - started
    baseline = _raw_run()
    started = time.perf_counter()
    outcome = run_billing(period=BILLED, finalize=False, actor="bench")
    ours = time.perf_counter() - started
    assert outcome.run.invoices == TENANTS, outcome.run.invoices
    per_million = _state["bytes"] / (_state["rows"] / 1_000_000)
    return Measurement(
        ours,
        baseline,
        note=f"{_state['rows']:,} events in {len(_months())} monthly partitions, {_state['per_month']:,} in the "
        f"billed month; {outcome.run.invoices:,} draft invoices; raw = aggregate + invoices + lines in SQL "
        f"(the aggregate alone: {aggregate:.2f} s); storage {per_million / 2**20:,.0f} MiB per million events "
        f"(table + 4 indexes; {_state['bytes'] / 2**30:,.1f} GiB in all)",
    )


@benchmark(
    "ledger at 50M events: meter ingest via POST /meter-events (batches of 1,000)",
    fixture=FIXTURE,
    target="as fast as into an empty ledger (≤ 3× executemany)",
)
def ledger_ingest() -> Measurement:
    total = int(os.environ.get("BENCH_METER_EVENTS", 50_000))
    ours, baseline = measure_meter_ingest(total)
    partitions = len(attached_partitions(connections[LEDGER]))
    return Measurement(
        ours,
        baseline,
        note=f"{total:,} events beside {_state['rows']:,}: {total / ours:,.0f} events/s through the endpoint "
        f"(each batch's ids looked up in all {partitions} attached months), {total / baseline:,.0f} rows/s raw",
    )


@benchmark(
    "ledger at 50M events: archive one closed month (detach into ledger_archive)",
    fixture=FIXTURE,
    target="current months untouched; cost = counting the month",
)
def ledger_archive() -> Measurement:
    # The two oldest months are long closed and have no drafts; the oldest is finalized for real
    # first (the archive refuses a month no finalized run has rated), the next is the baseline's.
    connection = connections[LEDGER]
    oldest, baseline_month = sorted(m for m in attached_partitions(connection) if FIRST <= m < BILLED)[:2]
    run_billing(period=oldest, finalize=True, actor="bench")
    before = _current_rows(connection)
    started = time.perf_counter()
    record = archive_month(oldest, actor="bench")
    ours = time.perf_counter() - started
    _state["rows"] -= record.rows
    with transaction.atomic(using=LEDGER), connection.cursor() as cursor:
        started = time.perf_counter()
        cursor.execute(f"ALTER TABLE billing_usageevent DETACH PARTITION {partition_name(baseline_month)}")
        baseline = time.perf_counter() - started
        transaction.set_rollback(True, using=LEDGER)  # the baseline month stays attached
    assert _current_rows(connection) == before
    return Measurement(
        ours,
        baseline,
        note=f"{record.rows:,} rows detached, counted and logged (ours counts and sums the month: that is its "
        "cost); raw = a bare DETACH; September's rows unchanged",
    )


def _current_rows(connection) -> int:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM {partition_name(BILLED)}")
        return cursor.fetchone()[0]
