"""Monthly partitions of the usage ledger on PostgreSQL; SQLite keeps one table.

`billing_usageevent` is range-partitioned by `period` (the first day of a UTC month), one
partition per month, named `billing_usageevent_yYYYYmMM`. A month's billing run, its usage
pages and its reconciliation read only that month's partition, so their cost follows the
month's size, not the ledger's age; a closed month can be detached whole (no DELETE of rows,
which the append-only triggers refuse) into the `ledger_archive` schema.

This module holds the DDL and the catalogue reads only; what runs them, when, and who may is in
`billing.services.ledger_partitions`. The migration that partitions the table uses it too, so a
partition made at migration time and one made by the beat task are the same.
"""

import re
from datetime import date

from billing.periods import next_period

PARENT = "billing_usageevent"
ARCHIVE_SCHEMA = "ledger_archive"
_NAME = re.compile(r"^billing_usageevent_y(\d{4})m(\d{2})$")
# A partition gets its own TRUNCATE guard: statement triggers are not cloned from the parent,
# and TRUNCATE of one partition would otherwise empty a month without touching a row trigger.
_NO_TRUNCATE = (
    "CREATE OR REPLACE TRIGGER {name}_no_truncate BEFORE TRUNCATE ON {qualified} "
    "FOR EACH STATEMENT EXECUTE FUNCTION billing_reject_change()"
)
# Row triggers on the parent are cloned onto attached partitions and removed when one is
# detached; an archived month keeps its rows append-only with triggers of its own.
_ARCHIVED_APPEND_ONLY = (
    "CREATE OR REPLACE TRIGGER {name}_archived_append_only BEFORE UPDATE OR DELETE ON {qualified} "
    "FOR EACH ROW EXECUTE FUNCTION billing_reject_change()"
)


def partition_name(period: date) -> str:
    return f"{PARENT}_y{period.year:04d}m{period.month:02d}"


def period_of_partition(name: str) -> date | None:
    match = _NAME.match(name)
    return date(int(match.group(1)), int(match.group(2)), 1) if match else None


def is_partitioned(connection) -> bool:
    if connection.vendor != "postgresql":
        return False
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT 1 FROM pg_partitioned_table p JOIN pg_class c ON c.oid = p.partrelid "
            "WHERE c.relname = %s AND c.relnamespace = 'public'::regnamespace",
            [PARENT],
        )
        return cursor.fetchone() is not None


def attached_partitions(connection) -> dict[date, str]:
    """Month → partition name, for every partition attached to the ledger now."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = %s::regclass",
            [f"public.{PARENT}"],
        )
        names = [row[0] for row in cursor.fetchall()]
    return {period: name for name in names if (period := period_of_partition(name)) is not None}


def archived_tables(connection) -> dict[date, str]:
    """Month → table name, for every month detached into the archive schema and not dropped."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relkind = 'r'",
            [ARCHIVE_SCHEMA],
        )
        names = [row[0] for row in cursor.fetchall()]
    return {period: name for name in names if (period := period_of_partition(name)) is not None}


def create_partition(cursor, period: date) -> str:
    """Create the month's partition (no-op if attached) with its TRUNCATE guard; returns its name.

    Indexes, constraints and row triggers come from the parent."""
    name = partition_name(period)
    cursor.execute(
        f"CREATE TABLE IF NOT EXISTS public.{name} PARTITION OF public.{PARENT} "
        f"FOR VALUES FROM ('{period.isoformat()}') TO ('{next_period(period).isoformat()}')"
    )
    cursor.execute(_NO_TRUNCATE.format(name=name, qualified=f"public.{name}"))
    return name


def detach_to_archive(cursor, period: date) -> str:
    """Detach the month's partition and move it into the archive schema, still append-only."""
    name = partition_name(period)
    cursor.execute(f"CREATE SCHEMA IF NOT EXISTS {ARCHIVE_SCHEMA}")
    cursor.execute(f"ALTER TABLE public.{PARENT} DETACH PARTITION public.{name}")
    cursor.execute(f"ALTER TABLE public.{name} SET SCHEMA {ARCHIVE_SCHEMA}")
    qualified = f"{ARCHIVE_SCHEMA}.{name}"
    cursor.execute(_ARCHIVED_APPEND_ONLY.format(name=name, qualified=qualified))
    cursor.execute(_NO_TRUNCATE.format(name=name, qualified=qualified))
    return qualified


def attach_from_archive(cursor, period: date) -> str:
    """Move an archived month back and attach it again (the reverse of detach_to_archive)."""
    name = partition_name(period)
    cursor.execute(f"DROP TRIGGER IF EXISTS {name}_archived_append_only ON {ARCHIVE_SCHEMA}.{name}")
    cursor.execute(f"ALTER TABLE {ARCHIVE_SCHEMA}.{name} SET SCHEMA public")
    cursor.execute(
        f"ALTER TABLE public.{PARENT} ATTACH PARTITION public.{name} "
        f"FOR VALUES FROM ('{period.isoformat()}') TO ('{next_period(period).isoformat()}')"
    )
    return name


def table_figures(cursor, qualified: str) -> tuple[int, int, int | None, int | None]:
    """(rows, GPU-microseconds, lowest id, highest id) of one partition or archived table."""
    cursor.execute(f"SELECT count(*), coalesce(sum(quantity_micro), 0), min(id), max(id) FROM {qualified}")
    rows, quantity, first, last = cursor.fetchone()
    return int(rows), int(quantity), first, last
