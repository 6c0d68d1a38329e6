"""Query expressions that Django does not ship, written once per vendor."""

from datetime import UTC, datetime, timedelta

from django.db import models

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MICROSECOND = timedelta(microseconds=1)


def epoch_micros(moment: datetime) -> int:
    """An aware datetime as EpochMicros reads it: whole microseconds since 1970 UTC."""
    return (moment - EPOCH) // MICROSECOND


def from_epoch_micros(micros: int) -> datetime:
    return EPOCH + micros * MICROSECOND


class EpochMicros(models.Func):
    """A datetime as whole microseconds since 1970-01-01 UTC (an integer), exactly.

    For paths that only compare or subtract many datetimes (a billing run's 10,000 usage spans
    against their allocations' memberships): reading a timestamp costs the driver and Django's
    time-zone loader ~5 µs a value, an integer a fraction of that. PostgreSQL's EXTRACT(EPOCH)
    is an exact numeric (since PostgreSQL 14, the oldest Django 5.2 supports); SQLite keeps Django's 'YYYY-MM-DD HH:MM:SS.ffffff' UTC text (six
    digits whenever there is a fraction), read as its whole seconds plus the fraction's digits."""

    output_field = models.BigIntegerField()

    def as_postgresql(self, compiler, connection, **extra_context):
        return self.as_sql(
            compiler, connection, template="(EXTRACT(EPOCH FROM %(expressions)s) * 1000000)::bigint", **extra_context
        )

    def as_sqlite(self, compiler, connection, **extra_context):
        sql, params = compiler.compile(self.source_expressions[0])
        return (
            # The whole seconds without the fraction: SQLite parses a time to milliseconds, so
            # strftime of '…:59.999999' would round up into the next second.
            f"(CAST(strftime('%%s', substr({sql}, 1, 19)) AS INTEGER) * 1000000 "
            f"+ CAST(substr({sql} || '.000000', 21, 6) AS INTEGER))",
            [*params, *params],
        )
