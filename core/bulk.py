"""`update_rows`: what `QuerySet.bulk_update` does, in one UPDATE … FROM (VALUES …) per batch.

Django's bulk_update writes a `CASE WHEN pk = … THEN …` per field and row; its SQL, and the
time Django spends building it, grow with rows × fields. Re-rating 10,000 draft invoices spent
16 s of a 32 s billing run there (benchmarks/bench_ledger.py). On PostgreSQL this joins the
table to a VALUES list instead, each value cast to its column's type; SQLite (3.33 and later,
which has UPDATE … FROM) joins it to the same list as a common table expression, untyped, the
column's affinity converting each value. A health report's ten drive rows cost ~80 ms of
Django building CASE WHENs on the demo's SQLite; older SQLite keeps bulk_update.
`insert_values` and
`update_returning` are the few-row INSERT and compare-and-set UPDATE of hot paths (placement),
where Django's per-row model instances and SQL building cost more than the database does.
`copy_values` and `update_values` take plain values instead of model instances (a billing run's
10,000 invoices and lines).
"""

import functools
import time
from collections.abc import Iterable, Sequence

from django.db import connections, models
from django.db.backends.sqlite3.base import Database as sqlite3
from django.db.models.constants import OnConflict
from django.utils import timezone


def update_rows(
    model: type[models.Model],
    objs: Sequence[models.Model],
    fields: Sequence[str],
    *,
    using: str,
    batch_size: int = 1000,
) -> None:
    if not objs:
        return
    connection = connections[using]
    postgres = connection.vendor == "postgresql"
    if not postgres and not (connection.vendor == "sqlite" and sqlite3.sqlite_version_info >= (3, 33)):
        model.objects.using(using).bulk_update(objs, fields, batch_size=batch_size)
        return
    pk = model._meta.pk
    columns = [model._meta.get_field(name) for name in fields]
    quote = connection.ops.quote_name
    if postgres:
        casts = [pk.db_type(connection), *(c.db_type(connection) for c in columns)]
        row = "(" + ", ".join(f"%s::{cast}" for cast in casts) + ")"
    else:
        row = "(" + ", ".join(["%s"] * (len(columns) + 1)) + ")"
    names = ", ".join(["pk", *(f"c{i}" for i in range(len(columns)))])
    assignments = ", ".join(f"{quote(c.column)} = v.c{i}" for i, c in enumerate(columns))
    table, key = quote(model._meta.db_table), quote(pk.column)
    with connection.cursor() as cursor:
        for lo in range(0, len(objs), batch_size):
            batch = objs[lo : lo + batch_size]
            params = []
            for obj in batch:
                params.append(pk.get_db_prep_value(obj.pk, connection))
                params.extend(c.get_db_prep_save(getattr(obj, c.attname), connection) for c in columns)
            values = ", ".join([row] * len(batch))
            if postgres:
                sql = f"UPDATE {table} AS t SET {assignments} FROM (VALUES {values}) AS v({names}) WHERE t.{key} = v.pk"
            else:
                sql = f"WITH v({names}) AS (VALUES {values}) UPDATE {table} AS t SET {assignments} FROM v WHERE t.{key} = v.pk"
            cursor.execute(sql, params)


def update_values(
    model: type[models.Model],
    fields: Sequence[str],
    rows: Sequence[Sequence],
    *,
    using: str,
    shared: dict | None = None,
) -> None:
    """`update_rows` for rows given as plain values: each row is (pk, *values of `fields`), and
    `shared` (field → value) is set on every row alike. No model instances: for a billing run's
    10,000 invoices, building them and preparing each field was most of the update's cost.

    On PostgreSQL one `UPDATE … FROM unnest(<one array per column>)`, whatever the number of
    rows (a VALUES list's thousands of placeholders cost the driver more than the update costs
    the database); the values must be what psycopg adapts as the columns expect, as for
    `copy_values`. Other vendors: one prepared UPDATE run for every row (executemany), values
    prepared by their fields. Like QuerySet.update, no auto_now and no signals."""
    if not rows:
        return
    connection = connections[using]
    meta = model._meta
    pk = meta.pk
    columns = [meta.get_field(name) for name in fields]
    constant = [(meta.get_field(name), value) for name, value in (shared or {}).items()]
    quote = connection.ops.quote_name
    table = quote(meta.db_table)
    head = [f.get_db_prep_save(value, connection) for f, value in constant]
    if connection.vendor == "postgresql":
        assignments = [f"{quote(c.column)} = v.c{i}" for i, c in enumerate(columns)]
        assignments += [f"{quote(f.column)} = %s" for f, _ in constant]
        arrays = ", ".join(f"%s::{_db_type(c, using)}[]" for c in (pk, *columns))
        names = ", ".join(["pk", *(f"c{i}" for i in range(len(columns)))])
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {table} AS t SET {', '.join(assignments)} FROM unnest({arrays}) AS v({names}) "
                f"WHERE t.{quote(pk.column)} = v.pk",
                [*head, *(list(column) for column in zip(*rows, strict=True))],
            )
        return
    assignments = [f"{quote(c.column)} = %s" for c in columns] + [f"{quote(f.column)} = %s" for f, _ in constant]
    with connection.cursor() as cursor:
        cursor.executemany(
            f"UPDATE {table} SET {', '.join(assignments)} WHERE {quote(pk.column)} = %s",
            [
                [
                    *(c.get_db_prep_save(value, connection) for c, value in zip(columns, row[1:], strict=True)),
                    *head,
                    pk.get_db_prep_value(row[0], connection),
                ]
                for row in rows
            ],
        )


def copy_values(
    model: type[models.Model], fields: Sequence[str], rows: Sequence[Sequence], *, using: str, binary: bool = False
) -> None:
    """Rows given as plain values of the named fields (attnames), written by COPY on PostgreSQL.

    For hot paths where building a model instance and preparing each field per row is most of
    the cost (a transition batch's 500 node events). The values must be what psycopg adapts as
    the columns expect (UUID, str, int, Decimal, date, aware datetime): what those fields'
    get_db_prep_save returns on PostgreSQL anyway. Defaults are not applied: name every column
    the row needs. `binary`: COPY in PostgreSQL's binary format, each value dumped as its
    column's type (about half the driver's time of the text format for a billing run's 10,000
    lines of uuids, numerics and timestamps); only for columns of plain scalar types (no JSON:
    a str is not a binary jsonb). Other vendors build the instances and bulk_create them."""
    if not rows:
        return
    connection = connections[using]
    if connection.vendor != "postgresql":
        model.objects.using(using).bulk_create([model(**dict(zip(fields, row))) for row in rows], batch_size=1000)
        return
    columns = [model._meta.get_field(name) for name in fields]
    # a column's type without its modifiers ("numeric(18, 2)" → "numeric"), as psycopg names types
    types = [_db_type(c, using).split("(")[0].strip() for c in columns] if binary else None
    _copy(connection, model, [c.column for c in columns], rows, types=types)


def _copy(
    connection, model: type[models.Model], columns: Sequence[str], rows: Iterable[Sequence], *, types=None
) -> None:
    names = ", ".join(connection.ops.quote_name(c) for c in columns)
    sql = f"COPY {connection.ops.quote_name(model._meta.db_table)} ({names}) FROM STDIN"
    if types is not None:
        sql += " (FORMAT BINARY)"
    started = time.monotonic()
    with connection.cursor() as cursor:
        with cursor.cursor.copy(sql) as copy:
            if types is not None:
                copy.set_types(types)
            for row in rows:
                copy.write_row(row)
    # COPY goes past Django's cursor wrapper: log it as the statement it is, so the fixed
    # query counts the tests assert (and CaptureQueriesContext) still see it.
    if connection.queries_logged:
        connection.queries_log.append({"sql": sql, "time": f"{time.monotonic() - started:.3f}"})


def insert_values(
    model: type[models.Model],
    rows: Sequence[dict],
    *,
    using: str,
    shared: dict | None = None,
    ignore_conflicts: bool = False,
    returning: bool = False,
) -> list | None:
    """One INSERT of `rows` (attname → value) with no model instances, for hot paths.

    Building a model instance per row and bulk_create's insert compiler cost more Python than
    the database spends on a few rows (placement writes three batches of eight; see
    tenants.services.placement). Values in `shared` are the same for every row and are sent
    once (`INSERT … SELECT v.column1, …, <shared> FROM (VALUES …) AS v`), which is most of a
    batch's parameters. A field in neither takes its default (a callable default of a primary
    key or unique field once per row, otherwise once), `auto_now`/`auto_now_add` fields now.
    Like bulk_create, no signals are sent, and large batches go in several statements.
    `ignore_conflicts` skips rows a unique constraint refuses; `returning` gives back the
    inserted rows' primary keys, so callers can count what went in. Needs RETURNING
    (PostgreSQL, SQLite ≥ 3.35) only when `returning` is set."""
    if not rows:
        return [] if returning else None
    connection = connections[using]
    shared = dict(shared or {})
    first = rows[0]
    varying: list[models.Field] = []
    constant: list[models.Field] = []
    now = None
    for f in model._meta.concrete_fields:
        if f.attname in first:
            varying.append(f)
            continue
        if f.attname not in shared:
            if getattr(f, "auto_now", False) or getattr(f, "auto_now_add", False):
                now = now or timezone.now()
                shared[f.attname] = now
            elif f.has_default() and callable(f.default) and (f.primary_key or f.unique):
                varying.append(f)  # a generated key: one per row
                continue
            else:
                shared[f.attname] = f.get_default()
        constant.append(f)
    postgres = connection.vendor == "postgresql"

    def placeholder(f: models.Field) -> str:
        # PostgreSQL types a VALUES column from its literals (a column all NULL would be text):
        # cast each to its column's type.
        return f"%s::{_db_type(f, connection.alias)}" if postgres else "%s"

    row_sql = "(" + ", ".join(placeholder(f) for f in varying) + ")"
    selected = [f"v.column{i + 1}" for i in range(len(varying))]
    head: list = []  # the shared values, in the SELECT: before the rows' in the SQL
    for f in constant:
        selected.append(placeholder(f))
        head.append(f.get_db_prep_save(shared[f.attname], connection))
    quote = connection.ops.quote_name
    on_conflict = OnConflict.IGNORE if ignore_conflicts else None
    columns = ", ".join(quote(f.column) for f in (*varying, *constant))
    suffix = connection.ops.on_conflict_suffix_sql(constant, on_conflict, None, None)
    tail = (f" {suffix}" if suffix else "") + (f" RETURNING {quote(model._meta.pk.column)}" if returning else "")
    # Batches as bulk_create's (SQLite caps the parameters of a statement).
    batch_size = max(1, min(2000, connection.ops.bulk_batch_size([*varying, *constant], rows)))
    inserted = []
    with connection.cursor() as cursor:
        for lo in range(0, len(rows), batch_size):
            batch = rows[lo : lo + batch_size]
            params = list(head)
            for row in batch:
                for f in varying:
                    value = row[f.attname] if f.attname in row else f.get_default()
                    params.append(f.get_db_prep_save(value, connection))
            cursor.execute(
                f"{connection.ops.insert_statement(on_conflict=on_conflict)} {quote(model._meta.db_table)} "
                f"({columns}) SELECT {', '.join(selected)} FROM (VALUES {', '.join([row_sql] * len(batch))}) AS v"
                f"{tail}",
                params,
            )
            if returning:
                inserted.extend(model._meta.pk.to_python(r[0]) for r in cursor.fetchall())
    return inserted if returning else None


@functools.cache
def _db_type(field: models.Field, using: str) -> str:
    return field.db_type(connections[using])


def update_returning(
    model: type[models.Model], pks: Sequence, *, values: dict, using: str, expected: dict | None = None
) -> list:
    """`UPDATE … SET values WHERE pk IN pks [AND expected …] RETURNING pk`: with `expected`, a
    compare-and-set that says which rows still held it and changed, in one statement (no
    read-back that a concurrent writer could slip between). Fields by name or attname; like
    QuerySet.update, no auto_now and no signals. Needs RETURNING (PostgreSQL, SQLite ≥ 3.35)."""
    if not pks:
        return []
    connection = connections[using]
    quote = connection.ops.quote_name
    meta = model._meta
    pk = meta.pk
    sets, params = [], []
    for name, value in values.items():
        f = meta.get_field(name)
        if value is None:
            sets.append(f"{quote(f.column)} = NULL")
        else:
            sets.append(f"{quote(f.column)} = %s")
            params.append(f.get_db_prep_save(value, connection))
    params.extend(pk.get_db_prep_value(v, connection) for v in pks)
    where = [f"{quote(pk.column)} IN ({', '.join(['%s'] * len(pks))})"]
    for name, value in (expected or {}).items():
        f = meta.get_field(name)
        where.append(f"{quote(f.column)} = %s")
        params.append(f.get_db_prep_value(value, connection))
    sql = (
        f"UPDATE {quote(meta.db_table)} SET {', '.join(sets)} WHERE {' AND '.join(where)} RETURNING {quote(pk.column)}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return [pk.to_python(r[0]) for r in cursor.fetchall()]
