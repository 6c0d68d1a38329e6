"""Reads of core's own tables that are more than a lookup (the audit trail's filter choices)."""

from django.db import connections, models


def distinct_values(model: type[models.Model], column: str, *, limit: int = 300) -> list[str]:
    """The distinct values of an indexed column, in order, by walking its index: one probe per
    value (a loose index scan, as a recursive CTE), so a filter's choices over a million audit
    rows cost as many index probes as there are values, not a DISTINCT over the table. The column
    must lead an index; at most `limit` values."""
    connection = connections[model.objects.db]
    table = connection.ops.quote_name(model._meta.db_table)
    col = connection.ops.quote_name(model._meta.get_field(column).column)
    sql = (
        f"WITH RECURSIVE walk(value, n) AS ("
        f"SELECT (SELECT MIN({col}) FROM {table}), 1 "
        f"UNION ALL SELECT (SELECT MIN({col}) FROM {table} WHERE {col} > walk.value), walk.n + 1 "
        f"FROM walk WHERE walk.value IS NOT NULL AND walk.n < %s"
        f") SELECT value FROM walk WHERE value IS NOT NULL"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [limit])
        return [row[0] for row in cursor.fetchall()]
