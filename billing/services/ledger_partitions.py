"""The usage ledger's monthly partitions: made ahead, made on demand, archived when closed.

- `ensure_usage_partitions` (beat, hourly; `run_loops`): the months an event may still arrive in
  and the next `LEDGER_PARTITIONS_AHEAD`, idempotent, under an advisory lock.
- `ensure_partitions_for` (meter ingest): a batch naming a month without a partition makes it
  first, in its own short transaction, so metering never depends on the beat having run (the
  ledger keeps taking usage while the control plane, and its beat, are down).
- `archive_month` / `restore_month` / `drop_archived_month` (`manage.py archive_ledger_month`):
  a closed month's partition leaves the ledger whole, counted, optionally exported, and can
  come back; invoices never read it again, they print from their frozen lines.

Everything here touches only the ledger database, except the audit rows written after commit.
SQLite keeps one table: ensuring is a no-op there and archiving is refused with the reason.
"""

import gzip
import hashlib
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from pathlib import Path

from django.conf import settings
from django.db import connections, transaction
from django.utils import timezone

from billing.models import (
    BillingRun,
    DisputeStatus,
    Invoice,
    InvoiceStatus,
    LedgerArchiveAction,
    LedgerArchiveRecord,
    UsageDispute,
    UsageSpan,
)
from billing.partitions import (
    ARCHIVE_SCHEMA,
    archived_tables,
    attach_from_archive,
    attached_partitions,
    create_partition,
    detach_to_archive,
    is_partitioned,
    partition_name,
    table_figures,
)
from billing.periods import format_period, next_period, period_end, period_of, previous_period
from billing.selectors import archived_periods
from core.errors import Conflict
from core.locks import advisory_lock, lock_id
from core.services.audit import record_audit

LEDGER = "ledger"
# Months this process has seen attached; ingest asks the catalogue only for a month not in it.
_known_attached: set[date] = set()


class ArchiveRefused(Conflict):
    code = "ledger_archive_refused"


@dataclass(frozen=True)
class MonthFigures:
    period: date
    partition: str
    location: str
    rows: int
    quantity_micro: int
    first_id: int | None
    last_id: int | None


def months_wanted(now: datetime, ahead: int | None = None) -> list[date]:
    """From the month of the oldest event ingest still accepts to `ahead` months past today."""
    ahead = settings.LEDGER_PARTITIONS_AHEAD if ahead is None else ahead
    oldest = now - timedelta(hours=settings.METER_MAX_EVENT_AGE_HOURS)
    month, last = previous_period(period_of(oldest)), period_of(now)
    for _ in range(ahead):
        last = next_period(last)
    months = []
    while month <= last:
        months.append(month)
        month = next_period(month)
    return months


def ensure_usage_partitions(*, now: datetime | None = None, ahead: int | None = None) -> list[str] | None:
    """Create the partitions `months_wanted` names that are missing; returns their names (None:
    another worker's pass holds the lock, as other loops say it).

    Level-triggered and idempotent: a pass compares the catalogue with the months wanted."""
    connection = connections[LEDGER]
    if not is_partitioned(connection):
        return []
    now = now or timezone.now()
    created: list[str] = []
    with transaction.atomic(using=LEDGER), advisory_lock("ledger_partitions", using=LEDGER) as acquired:
        if not acquired:
            return None
        attached = attached_partitions(connection)
        archived = archived_periods()
        with connection.cursor() as cursor:
            for month in months_wanted(now, ahead):
                if month not in attached and month not in archived:
                    created.append(create_partition(cursor, month))
                    attached[month] = created[-1]
        _remember_on_commit(set(attached))
    return created


def ensure_partitions_for(periods: set[date]) -> None:
    """Make sure every month in `periods` has an attached partition before a batch inserts.

    Ingest calls it before opening its own transaction: creating a partition takes a strong
    lock on the parent, and waiting for that while holding a batch's locks could deadlock two
    batches. (Called inside a caller's transaction, as the seed and tests do, it runs there.)
    An archived month is refused (ingest never accepts usage that old: see archive_month)."""
    missing = periods - _known_attached
    if not missing:
        return
    connection = connections[LEDGER]
    if not is_partitioned(connection):
        _known_attached.update(periods)
        return
    with transaction.atomic(using=LEDGER):
        with connection.cursor() as cursor:
            # Blocking: a second batch for the same new month waits, then finds it made.
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [lock_id("ledger_partitions")])
            attached = attached_partitions(connection)
            archived = archived_periods() & missing
            if archived:
                raise ArchiveRefused(
                    f"usage for {', '.join(sorted(map(format_period, archived)))} arrived after the month "
                    "was archived; restore it (manage.py archive_ledger_month --restore) or record a "
                    "late-usage adjustment",
                    code="period_archived",
                )
            for month in sorted(missing - set(attached)):
                create_partition(cursor, month)
        _remember_on_commit(periods)


def _remember_on_commit(periods: set[date]) -> None:
    # Only once committed: a partition made inside a transaction that rolls back is gone again.
    transaction.on_commit(lambda: _known_attached.update(periods), using=LEDGER)


def forget_known_partitions() -> None:
    """Tests and the archive command: the next batch checks the catalogue again."""
    _known_attached.clear()


def _refusal(period: date, now: datetime) -> str | None:
    """Why `period` may not be archived now, or None."""
    open_until = period_end(period) + timedelta(hours=settings.METER_MAX_EVENT_AGE_HOURS)
    if now < open_until + timedelta(days=settings.LEDGER_ARCHIVE_GRACE_DAYS):
        return (
            f"{format_period(period)} still accepts usage until {open_until:%Y-%m-%d %H:%M} UTC "
            f"(events up to {settings.METER_MAX_EVENT_AGE_HOURS} h old), plus a "
            f"{settings.LEDGER_ARCHIVE_GRACE_DAYS}-day grace; archive it after that"
        )
    drafts = Invoice.objects.using(LEDGER).filter(period=period, status=InvoiceStatus.DRAFT).count()
    if drafts:
        return (
            f"{format_period(period)} has {drafts} draft invoice(s); finalize the month first (manage.py run_billing)"
        )
    disputes = UsageDispute.objects.using(LEDGER).filter(period=period, status=DisputeStatus.OPEN).count()
    if disputes:
        return f"{format_period(period)} has {disputes} open usage dispute(s); resolve them first"
    return None


def month_figures(period: date) -> MonthFigures:
    """The attached partition's counts, as archive_month would record them."""
    connection = connections[LEDGER]
    if not is_partitioned(connection):
        raise ArchiveRefused(
            "the ledger is one table on SQLite; archiving detaches a PostgreSQL partition",
            code="ledger_not_partitioned",
        )
    name = partition_name(period)
    if period not in attached_partitions(connection):
        raise ArchiveRefused(f"{format_period(period)} has no attached partition ({name})", code="no_partition")
    with connection.cursor() as cursor:
        figures = table_figures(cursor, f"public.{name}")
    return MonthFigures(period, name, f"public.{name}", *figures)


def _export(cursor, qualified: str, directory: Path, period: date) -> tuple[str, str]:
    """COPY the table to `usage-YYYY-MM.csv.gz` in id order; (path, SHA-256 of the file)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"usage-{format_period(period)}.csv.gz"
    digest = hashlib.sha256()

    class _Hashing:
        def __init__(self, raw):
            self.raw = raw

        def write(self, data):
            digest.update(data)
            return self.raw.write(data)

    with open(path, "wb") as raw:
        with gzip.GzipFile(fileobj=_Hashing(raw), mode="wb", mtime=0) as gz:
            with cursor.cursor.copy(
                f"COPY (SELECT * FROM {qualified} ORDER BY id) TO STDOUT WITH (FORMAT csv, HEADER)"
            ) as copy:
                for chunk in copy:
                    gz.write(chunk)
    return str(path), digest.hexdigest()


def archive_month(
    period: date, *, actor: str, export_dir: Path | None = None, now: datetime | None = None
) -> LedgerArchiveRecord:
    """Detach a closed month's partition into the archive schema (and export it, if asked)."""
    now = now or timezone.now()
    connection = connections[LEDGER]
    name = partition_name(period)
    if not is_partitioned(connection) or period not in attached_partitions(connection):
        month_figures(period)  # raises the reason (SQLite, or no attached partition)
    refusal = _refusal(period, now)
    if refusal:
        raise ArchiveRefused(refusal)
    with transaction.atomic(using=LEDGER):
        with connection.cursor() as cursor:
            # Waits for in-flight batches; none can name this month any more (refusal above).
            # The month is counted once, under the lock: the figures recorded are the ones detached.
            cursor.execute(f"LOCK TABLE public.{name} IN ACCESS EXCLUSIVE MODE")
            figures = MonthFigures(period, name, f"public.{name}", *table_figures(cursor, f"public.{name}"))
            _check_rated(figures)
            export_path, export_sha = "", ""
            if export_dir is not None:
                export_path, export_sha = _export(cursor, figures.location, export_dir, period)
            location = detach_to_archive(cursor, period)
        record = LedgerArchiveRecord.objects.using(LEDGER).create(
            period=period,
            action=LedgerArchiveAction.ARCHIVED,
            partition=figures.partition,
            location=location,
            rows=figures.rows,
            quantity_micro=figures.quantity_micro,
            first_id=figures.first_id,
            last_id=figures.last_id,
            export_path=export_path,
            export_sha256=export_sha,
            actor=actor,
        )
    forget_known_partitions()
    _audit(record, actor)
    return record


def _check_rated(figures: MonthFigures) -> None:
    """Refuse a month with usage no finalized run has rated."""
    if not figures.rows:
        return
    finalized = BillingRun.objects.using(LEDGER).filter(finalize=True)
    if not finalized.filter(period=figures.period).exists():
        raise ArchiveRefused(
            f"{format_period(figures.period)} holds {figures.rows} usage rows but was never finalized; "
            "run the finalizing billing run first (manage.py run_billing --finalize)"
        )
    # Late usage of a month is billed by a later month's run: every row must be under the
    # watermark of some finalized run, or archiving would take unbilled usage away.
    rated_up_to = max(finalized.values_list("watermark", flat=True))
    if figures.last_id > rated_up_to:
        raise ArchiveRefused(
            f"{format_period(figures.period)} holds usage up to ledger id {figures.last_id} that no finalized "
            f"run has rated yet (highest watermark {rated_up_to}); it is billed as late usage by the "
            "next month's finalizing run: archive after that"
        )


def _sha256_of(path: Path) -> str:
    """A file's SHA-256, read in 1 MiB pieces (an export is hundreds of MiB)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while piece := handle.read(1 << 20):
            digest.update(piece)
    return digest.hexdigest()


def _last_archive(period: date) -> LedgerArchiveRecord:
    record = LedgerArchiveRecord.objects.using(LEDGER).filter(period=period).order_by("-created_at").first()
    if record is None or record.action == LedgerArchiveAction.RESTORED:
        raise ArchiveRefused(f"{format_period(period)} is not archived", code="not_archived")
    return record


def _log_after(archived: LedgerArchiveRecord, action: str, actor: str, **changed) -> LedgerArchiveRecord:
    """The next log row of a month: the archived figures carried over, `changed` replaced."""
    fields = {
        name: getattr(archived, name)
        for name in (
            "period",
            "partition",
            "rows",
            "quantity_micro",
            "first_id",
            "last_id",
            "export_path",
            "export_sha256",
        )
    }
    return LedgerArchiveRecord.objects.using(LEDGER).create(**{**fields, **changed}, action=action, actor=actor)


def restore_month(period: date, *, actor: str) -> LedgerArchiveRecord:
    """Attach an archived month again, after checking it is exactly what was detached."""
    connection = connections[LEDGER]
    archived = _last_archive(period)
    if archived.action == LedgerArchiveAction.DROPPED:
        raise ArchiveRefused(
            f"{format_period(period)} was dropped after export to {archived.export_path}; load that file "
            "into a new table to read it (docs/billing.md, 'Ledger at scale')",
            code="archive_dropped",
        )
    with transaction.atomic(using=LEDGER):
        with connection.cursor() as cursor:
            figures = table_figures(cursor, archived.location)
            expected = (archived.rows, archived.quantity_micro, archived.first_id, archived.last_id)
            if figures != expected:
                raise ArchiveRefused(
                    f"{archived.location} holds {figures[0]} rows / {figures[1]} GPU-µs, not the "
                    f"{archived.rows} rows / {archived.quantity_micro} GPU-µs archived; not restored",
                    code="archive_altered",
                )
            name = attach_from_archive(cursor, period)
        record = _log_after(
            archived, LedgerArchiveAction.RESTORED, actor, location=f"public.{name}", export_path="", export_sha256=""
        )
    forget_known_partitions()
    _audit(record, actor)
    return record


def drop_archived_month(period: date, *, actor: str) -> LedgerArchiveRecord:
    """Drop an archived month's table once its export is on disk with the recorded hash."""
    connection = connections[LEDGER]
    archived = _last_archive(period)
    if archived.action == LedgerArchiveAction.DROPPED:
        raise ArchiveRefused(f"{format_period(period)} was already dropped", code="archive_dropped")
    if not archived.export_path:
        raise ArchiveRefused(
            f"{format_period(period)} was archived without an export; archive again with --export-dir "
            "(restore it first) before dropping",
            code="no_export",
        )
    path = Path(archived.export_path)
    if not path.is_file() or _sha256_of(path) != archived.export_sha256:
        raise ArchiveRefused(
            f"the export {path} is missing or does not match its recorded SHA-256; not dropped",
            code="export_mismatch",
        )
    with transaction.atomic(using=LEDGER):
        with connection.cursor() as cursor:
            cursor.execute(f"DROP TABLE {archived.location}")
        # The spans cover the rows in the ledger, attached or archived; these rows are gone.
        UsageSpan.objects.using(LEDGER).filter(period=period).delete()
        record = _log_after(archived, LedgerArchiveAction.DROPPED, actor, location=str(path))
    _audit(record, actor)
    return record


def ledger_months() -> list[dict]:
    """Every month the ledger knows: attached (with its size on disk), archived or dropped."""
    connection = connections[LEDGER]
    if not is_partitioned(connection):
        return []
    attached = attached_partitions(connection)
    archived = archived_tables(connection)
    latest = {r.period: r for r in LedgerArchiveRecord.objects.using(LEDGER).order_by("created_at")}
    months = sorted(set(attached) | set(archived) | set(latest))
    sizes: dict[str, int] = {}
    names = [f"public.{n}" for n in attached.values()] + [f"{ARCHIVE_SCHEMA}.{n}" for n in archived.values()]
    if names:
        with connection.cursor() as cursor:
            cursor.execute("SELECT n, pg_total_relation_size(n::regclass) FROM unnest(%s::text[]) AS n", [names])
            sizes = dict(cursor.fetchall())
    rows = []
    for month in months:
        record = latest.get(month)
        if month in attached:
            state, where = "attached", f"public.{attached[month]}"
        elif record is not None and record.action == LedgerArchiveAction.DROPPED:
            state, where = "dropped", record.export_path
        else:
            state, where = "archived", f"{ARCHIVE_SCHEMA}.{archived.get(month, partition_name(month))}"
        rows.append(
            {
                "period": month,
                "state": state,
                "location": where,
                "bytes": sizes.get(where),
                "rows": record.rows if record is not None and state != "attached" else None,
            }
        )
    return rows


def _audit(record: LedgerArchiveRecord, actor: str) -> None:
    """Called once the ledger transaction has committed: the control-plane audit trail names the
    action too (the ledger's own log is the record)."""
    record_audit(
        actor=actor,
        action=f"billing.ledger_month_{record.action}",
        target=record,
        after={
            "period": format_period(record.period),
            "rows": record.rows,
            "quantity_micro": record.quantity_micro,
            "location": record.location,
            "export_sha256": record.export_sha256,
        },
    )
