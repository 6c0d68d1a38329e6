"""`update_rows`: what `QuerySet.bulk_update` does, in one UPDATE … FROM (VALUES …) per batch.

Django's bulk_update writes a `CASE WHEN pk = … THEN …` per field and row; its SQL, and the
time Django spends building it, grow with rows × fields. Re-rating 10,000 draft invoices spent
16 s of a 32 s billing run there (benchmarks/bench_ledger.py). On PostgreSQL this joins the
table to a VALUES list instead, each value cast to its column's type; other vendors keep
bulk_update.
"""

import time
from collections.abc import Iterable, Sequence

from django.db import connections, models


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
    if connection.vendor != "postgresql":
        model.objects.using(using).bulk_update(objs, fields, batch_size=batch_size)
        return
    pk = model._meta.pk
    columns = [model._meta.get_field(name) for name in fields]
    quote = connection.ops.quote_name
    casts = [pk.db_type(connection), *(c.db_type(connection) for c in columns)]
    row = "(" + ", ".join(f"%s::{cast}" for cast in casts) + ")"
    names = ", ".join(["pk", *(f"c{i}" for i in range(len(columns)))])
    assignments = ", ".join(f"{quote(c.column)} = v.c{i}" for i, c in enumerate(columns))
    with connection.cursor() as cursor:
        for lo in range(0, len(objs), batch_size):
            batch = objs[lo : lo + batch_size]
            params = []
            for obj in batch:
                params.append(pk.get_db_prep_value(obj.pk, connection))
                params.extend(c.get_db_prep_save(getattr(obj, c.attname), connection) for c in columns)
            cursor.execute(
                f"UPDATE {quote(model._meta.db_table)} AS t SET {assignments} "
                f"FROM (VALUES {', '.join([row] * len(batch))}) AS v({names}) WHERE t.{quote(pk.column)} = v.pk",
                params,
            )


def insert_rows(model: type[models.Model], objs: Sequence[models.Model], *, using: str) -> None:
    """What `bulk_create` does for rows whose primary key is set in Python, by COPY on PostgreSQL.

    bulk_create builds one parameterised INSERT per batch; for 10,000 invoice lines of 18
    columns that was ~5 s of a billing run, mostly Django preparing the SQL. COPY streams the
    same values (each prepared by its field, as bulk_create would) and the table's triggers and
    constraints run as for an INSERT. Other vendors keep bulk_create."""
    if not objs:
        return
    connection = connections[using]
    if connection.vendor != "postgresql":
        model.objects.using(using).bulk_create(objs, batch_size=1000)
        return
    fields = [f for f in model._meta.concrete_fields]
    _copy(
        connection,
        model,
        [f.column for f in fields],
        ([f.get_db_prep_save(f.pre_save(obj, True), connection) for f in fields] for obj in objs),
    )


def copy_values(model: type[models.Model], fields: Sequence[str], rows: Sequence[Sequence], *, using: str) -> None:
    """Rows given as plain values of the named fields (attnames), written by COPY on PostgreSQL.

    For hot paths where building a model instance and preparing each field per row is most of
    the cost (a transition batch's 500 node events). The values must be what psycopg adapts as
    the columns expect (UUID, str, int, aware datetime): what those fields' get_db_prep_save
    returns on PostgreSQL anyway. Defaults are not applied: name every column the row needs.
    Other vendors build the instances and bulk_create them."""
    if not rows:
        return
    connection = connections[using]
    if connection.vendor != "postgresql":
        model.objects.using(using).bulk_create([model(**dict(zip(fields, row))) for row in rows], batch_size=1000)
        return
    _copy(connection, model, [model._meta.get_field(name).column for name in fields], rows)


def _copy(connection, model: type[models.Model], columns: Sequence[str], rows: Iterable[Sequence]) -> None:
    names = ", ".join(connection.ops.quote_name(c) for c in columns)
    sql = f"COPY {connection.ops.quote_name(model._meta.db_table)} ({names}) FROM STDIN"
    started = time.monotonic()
    with connection.cursor() as cursor:
        with cursor.cursor.copy(sql) as copy:
            for row in rows:
                copy.write_row(row)
    # COPY goes past Django's cursor wrapper: log it as the statement it is, so the fixed
    # query counts the tests assert (and CaptureQueriesContext) still see it.
    if connection.queries_logged:
        connection.queries_log.append({"sql": sql, "time": f"{time.monotonic() - started:.3f}"})
