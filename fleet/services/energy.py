"""Energy from cumulative counters: an agent outage loses nothing, a reset or a bad reading
never makes energy up.

The agent reports counters that only grow: NVML's total energy per GPU (mJ since the driver
loaded) and, where the node has one, the meter's energy counter (J; the agent integrates the
meter's power itself when the BMC keeps no counter, and persists it across restarts). Energy
over any gap, a 10 s heartbeat or a 3-hour outage, is the counter delta, spread evenly over
the gap's UTC hours (nothing says how it was distributed inside the gap).

- A counter lower than its baseline went backwards (driver reload, BMC reset): a detected
  reset, counted and logged. Counters restart at zero, so the new value is the energy since
  the reset; what was used between the last reading and the reset is unknown and not credited.
- A delta whose average power is above the node type's rated maximum is impossible: refused,
  counted and logged, credits nothing, and the new values become the baseline.
- Without a meter counter the node's energy is estimated: GPU counter deltas + the type's host
  share × elapsed time (fleet.wall_power), recorded under source `estimate`.
"""

import functools
import json
import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.db import connection, transaction

from fleet.choices import EnergySource
from fleet.models import NodeEnergyCounter, NodeEnergyHour, NodeEnergyMonth
from fleet.wall_power import spread_over_hours

log = logging.getLogger(__name__)

# Counters are integrated at most this often: a heartbeat every 10 s need not write each time,
# and nothing is lost by waiting because the next delta covers the whole span.
INTEGRATE_EVERY = timedelta(seconds=60)
MAX_COUNTER = 2**62  # bounds what a client can make the database hold
UNREAD = object()  # record_counters reads the baseline itself
ROWS_PER_STATEMENT = 1000  # hour rows a statement adds (6 parameters each)


def _delta(old, new) -> tuple[int, bool]:
    """(energy since the baseline, whether the counter went backwards)."""
    if new < old:
        return new, True
    return new - old, False


@dataclass(frozen=True)
class Baseline:
    """The counters last taken, as the database holds them. `read_at` is the column's own value
    (text on SQLite), handed back unchanged in the compare-and-set that replaces it."""

    read_at: object
    wall_energy_j: int | None
    wall_source: str
    gpu_energy_mj: dict[str, int]


def _baseline_from_row(read_at, wall_energy_j, wall_source, gpu_energy_mj) -> Baseline | None:
    """A Baseline from the counter row's columns as a cursor returns them (None: no row)."""
    if read_at is None:
        return None
    if isinstance(gpu_energy_mj, str):  # SQLite, and PostgreSQL's jsonb as Django loads it
        gpu_energy_mj = json.loads(gpu_energy_mj)
    return Baseline(read_at, wall_energy_j, wall_source or "", gpu_energy_mj or {})


def read_baseline(node_id) -> Baseline | None:
    with connection.cursor() as cursor:
        cursor.execute(_READ_SQL, [_db_node_id(node_id)])
        row = cursor.fetchone()
    return None if row is None else _baseline_from_row(*row)


def as_datetime(value, tz=UTC) -> datetime:
    """A timestamp column's value from a raw query as an aware datetime (SQLite returns text or
    a naive datetime)."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value if value.tzinfo is not None else value.replace(tzinfo=tz)


def record_counters(
    *,
    node_id,
    now: datetime,
    node_kw: Decimal,
    host_kw: Decimal | None,
    wall_energy_j: int | None,
    wall_source: str,
    gpu_energy_mj: dict[int, int],
    baseline: Baseline | None | object = UNREAD,
) -> str:
    """Take one heartbeat's counters. Returns what happened: `baseline`, `recorded`, `too_soon`,
    `refused`, `nothing` (no usable counter) or `raced` (another heartbeat of the node took its
    counters since `baseline` was read; its delta covers this span, so nothing is lost).

    `baseline`: the counter row as the caller read it earlier (None: no row); read here when not
    given. No row lock is held between the read and the write: the write replaces the baseline
    only if `read_at` is still the one read (compare-and-set), and on PostgreSQL it is one
    statement that also adds the hour and month rows. Integrating was 4-6 statements through the
    ORM in a transaction (a locked read, a save, an UPDATE, or an INSERT the first time, per hour
    and month row), 3-5 ms of the web worker's CPU on the 2-core VM: more than the heartbeat and
    the desired-state poll together, once a minute for every node."""
    if baseline is UNREAD:
        baseline = read_baseline(node_id)
    new_gpus = {str(k): v for k, v in gpu_energy_mj.items()}
    source_kept = wall_source if wall_energy_j is not None else ""
    if baseline is None:
        with connection.cursor() as cursor:
            cursor.execute(
                _INSERT_BASELINE_SQL,
                [_db_node_id(node_id), _db_time(now), wall_energy_j, source_kept, _db_json(new_gpus)],
            )
        return "baseline"
    elapsed = (now - as_datetime(baseline.read_at, now.tzinfo)).total_seconds()
    if elapsed < INTEGRATE_EVERY.total_seconds():
        return "too_soon"
    reset = False
    gpu_j = None
    old_gpus = baseline.gpu_energy_mj
    common = [i for i in gpu_energy_mj if str(i) in old_gpus]
    if common:
        total_mj = 0
        for index in common:
            delta, went_back = _delta(old_gpus[str(index)], gpu_energy_mj[index])
            total_mj += delta
            reset |= went_back
        gpu_j = total_mj // 1000
    if wall_energy_j is not None and baseline.wall_energy_j is not None and baseline.wall_source == wall_source:
        it_j, went_back = _delta(baseline.wall_energy_j, wall_energy_j)
        reset |= went_back
        source = wall_source
    elif gpu_j is not None and host_kw is not None:
        it_j = gpu_j + int(host_kw * 1000 * Decimal(str(elapsed)))
        source = EnergySource.ESTIMATE
    else:
        it_j, source = None, None

    refused_detail = None
    if it_j is not None and it_j > float(node_kw) * 1000 * elapsed:
        refused_detail = (
            f"{it_j} J in {elapsed:.0f} s is {it_j / elapsed / 1000:.1f} kW, above the {node_kw} kW the node type can draw"
        )[:200]
    update = [
        _db_time(now),
        wall_energy_j,
        source_kept,
        _db_json(new_gpus),
        int(reset),
        _db_time(now) if reset else None,
        int(refused_detail is not None),
        _db_time(now) if refused_detail is not None else None,
        refused_detail,
        _db_node_id(node_id),
        baseline.read_at,
    ]
    parts = []
    if it_j is not None and refused_detail is None:
        start = now - timedelta(seconds=elapsed)
        gpu_parts = dict((hour, j) for hour, j, _ in spread_over_hours(start, now, gpu_j or 0))
        parts = [
            (hour, joules, gpu_parts.get(hour, 0), seconds)
            for hour, joules, seconds in spread_over_hours(start, now, it_j)
        ]
    if not _replace_baseline(node_id, source, update, parts):
        return "raced"
    if reset:
        log.warning(
            "energy counter reset detected on node %s (counter went backwards); crediting the energy "
            "since the reset only",
            node_id,
        )
    if refused_detail is not None:
        log.warning("energy reading refused on node %s: %s", node_id, refused_detail)
        return "refused"
    return "recorded" if parts else "nothing"


def _replace_baseline(node_id, source, update: list, parts: list[tuple[datetime, int, int, int]]) -> bool:
    """The compare-and-set of the baseline and, when it holds, the (hour, IT J, GPU J, seconds)
    parts added to the node's hour rows and to its month roll-up rows (one row per month
    touched, however long the gap), all or nothing. False: the baseline had moved on."""
    months: dict = {}
    for hour, it_j, gpu_j, seconds in parts:
        m = months.setdefault(hour.astimezone(UTC).date().replace(day=1), [0, 0, 0])
        m[0], m[1], m[2] = m[0] + it_j, m[1] + gpu_j, m[2] + seconds
    db_node = _db_node_id(node_id)
    hour_rows = [(db_node, _db_time(hour), source, it_j, gpu_j, s) for hour, it_j, gpu_j, s in parts]
    month_rows = [(db_node, connection.ops.adapt_datefield_value(m), source, *sums) for m, sums in months.items()]
    if connection.vendor == "postgresql":
        # One statement, so no transaction to open and commit: the hour and month inserts
        # read the UPDATE's RETURNING and add nothing when it matched no row.
        sql = f"WITH replaced AS ({_REPLACE_SQL} RETURNING 1)"
        params = list(update)
        for n, (table, key, rows) in enumerate(_chunks(hour_rows, month_rows)):
            sql += f", added_{n} AS ({_upsert_sql(table, key, len(rows), guarded=True)})"
            params += [value for row in rows for value in row]
        with connection.cursor() as cursor:
            cursor.execute(sql + " SELECT count(*) FROM replaced", params)
            return cursor.fetchone()[0] == 1
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(_REPLACE_SQL, update)
        if cursor.rowcount != 1:
            return False
        for table, key, rows in _chunks(hour_rows, month_rows):
            cursor.execute(_upsert_sql(table, key, len(rows)), [value for row in rows for value in row])
    return True


def _chunks(hour_rows: list, month_rows: list):
    """(model, key column, rows) in slices of ROWS_PER_STATEMENT: a year-long gap is 8,760 hour
    rows, past SQLite's limit on a statement's parameters."""
    for model, key, rows in ((NodeEnergyHour, "hour", hour_rows), (NodeEnergyMonth, "month", month_rows)):
        for at in range(0, len(rows), ROWS_PER_STATEMENT):
            yield model, key, rows[at : at + ROWS_PER_STATEMENT]


def _db_node_id(node_id):
    return NodeEnergyCounter._meta.pk.target_field.get_db_prep_value(node_id, connection)


def _db_time(value: datetime):
    return connection.ops.adapt_datetimefield_value(value)


def _db_json(value: dict):
    return _COUNTERS_FIELD.get_db_prep_value(value, connection)


@functools.cache
def _upsert_sql(model, key: str, rows: int, *, guarded: bool = False) -> str:
    """Add each row's energy and seconds to the (node, `key`, source) row, creating it if absent.
    `guarded`: only when the `replaced` CTE returned its row (PostgreSQL's one-statement form;
    as in core.bulk.insert_values, each value is cast to its column's type, since PostgreSQL
    would otherwise type a VALUES column from its parameters)."""
    table = model._meta.db_table
    names = ("node_id", key, "source", "it_energy_j", "gpu_energy_j", "seconds")
    columns = ", ".join(names)
    adds = ", ".join(f"{c} = {table}.{c} + excluded.{c}" for c in ("it_energy_j", "gpu_energy_j", "seconds"))
    if guarded:
        casts = ", ".join(f"%s::{model._meta.get_field(n.removesuffix('_id')).db_type(connection)}" for n in names)
        values = ", ".join([f"({casts})"] * rows)
        body = f"SELECT * FROM (VALUES {values}) AS v({columns}) WHERE EXISTS (SELECT 1 FROM replaced)"
    else:
        body = "VALUES " + ", ".join(["(%s, %s, %s, %s, %s, %s)"] * rows)
    return f"INSERT INTO {table} ({columns}) {body} ON CONFLICT (node_id, {key}, source) DO UPDATE SET {adds}"


_COUNTERS_FIELD = NodeEnergyCounter._meta.get_field("gpu_energy_mj")
_COUNTER_TABLE = NodeEnergyCounter._meta.db_table
_READ_SQL = f"SELECT read_at, wall_energy_j, wall_source, gpu_energy_mj FROM {_COUNTER_TABLE} WHERE node_id = %s"
_INSERT_BASELINE_SQL = (
    f"INSERT INTO {_COUNTER_TABLE} (node_id, read_at, wall_energy_j, wall_source, gpu_energy_mj, resets, refused, "
    "last_refused_detail) VALUES (%s, %s, %s, %s, %s, 0, 0, '') ON CONFLICT (node_id) DO NOTHING"
)
_REPLACE_SQL = (
    f"UPDATE {_COUNTER_TABLE} SET read_at = %s, wall_energy_j = %s, wall_source = %s, gpu_energy_mj = %s, "
    "resets = resets + %s, last_reset_at = COALESCE(%s, last_reset_at), refused = refused + %s, "
    "last_refused_at = COALESCE(%s, last_refused_at), last_refused_detail = COALESCE(%s, last_refused_detail) "
    "WHERE node_id = %s AND read_at = %s"
)
