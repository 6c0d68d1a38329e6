"""Usage events partitioned by month on PostgreSQL; the archive log; disputes lose their FK.

On PostgreSQL `billing_usageevent` becomes a range-partitioned table (by `period`), its rows
copied into one partition per month that has any, plus the months around today; its keys gain
`period` (a partitioned table's unique keys must name the partition column), and `id` comes from
a sequence owned by the column (PostgreSQL 15 has no identity columns on partitioned tables).
The append-only triggers are re-created on the new table; each partition gets its own
TRUNCATE guard (billing.partitions). SQLite keeps one table.
"""

from datetime import UTC, datetime

import django.db.models.deletion
from django.db import migrations, models

import core.ids
from billing.partitions import create_partition
from billing.periods import next_period, period_of, previous_period

COLUMNS = (
    'id, event_id, part, tenant_id, allocation_id, node_id, sku, start, "end", period, '
    "quantity_micro, unit, payload_hash, received_at"
)
COLUMN_DDL = """
    event_id varchar(100) NOT NULL,
    part smallint NOT NULL,
    tenant_id uuid NOT NULL,
    allocation_id uuid NOT NULL,
    node_id uuid NOT NULL,
    sku varchar(50) NOT NULL,
    start timestamptz NOT NULL,
    "end" timestamptz NOT NULL,
    period date NOT NULL,
    quantity_micro bigint NOT NULL,
    unit varchar(16) NOT NULL,
    payload_hash varchar(64) NOT NULL,
    received_at timestamptz NOT NULL,
    CONSTRAINT billing_usage_event_part_period_unique UNIQUE (event_id, part, period),
    CONSTRAINT billing_usage_end_after_start CHECK ("end" > start),
    CONSTRAINT billing_usage_quantity_nonneg CHECK (quantity_micro >= 0),
    CONSTRAINT billing_usageevent_part_check CHECK (part >= 0)
"""
OLD_NAMES = (
    "billing_usageevent_pkey",
    "billing_usage_event_part_period_unique",
)
OLD_INDEXES = ("billing_usage_period_idx", "billing_usage_tenant_start_idx")
INDEXES = (
    "CREATE INDEX billing_usage_period_idx ON billing_usageevent (period, tenant_id, sku)",
    "CREATE INDEX billing_usage_tenant_start_idx ON billing_usageevent (tenant_id, start)",
)
TRIGGERS = (
    "CREATE TRIGGER billing_usageevent_append_only BEFORE UPDATE OR DELETE ON billing_usageevent "
    "FOR EACH ROW EXECUTE FUNCTION billing_reject_change()",
    "CREATE TRIGGER billing_usageevent_no_truncate BEFORE TRUNCATE ON billing_usageevent "
    "FOR EACH STATEMENT EXECUTE FUNCTION billing_reject_change()",
)
ARCHIVE_LOG = "billing_ledgerarchiverecord"


def _set_aside(cursor):
    """Rename the current table and its named keys and indexes out of the way."""
    cursor.execute("LOCK TABLE billing_usageevent IN ACCESS EXCLUSIVE MODE")
    cursor.execute("ALTER TABLE billing_usageevent RENAME TO billing_usageevent_before")
    for name in OLD_NAMES:
        cursor.execute(f"ALTER TABLE billing_usageevent_before RENAME CONSTRAINT {name} TO {name}_before")
    for name in OLD_INDEXES:
        cursor.execute(f"ALTER INDEX {name} RENAME TO {name}_before")


def _finish(cursor, sequence_owner: bool):
    for statement in (*INDEXES, *TRIGGERS):
        cursor.execute(statement)
    cursor.execute(f"INSERT INTO billing_usageevent ({COLUMNS}) SELECT {COLUMNS} FROM billing_usageevent_before")
    if sequence_owner:
        cursor.execute("ALTER SEQUENCE billing_usageevent_id_seq_by_month OWNED BY billing_usageevent.id")
    cursor.execute(
        "SELECT setval(pg_get_serial_sequence('billing_usageevent', 'id'), "
        "coalesce((SELECT max(id) FROM billing_usageevent), 0) + 1, false)"
    )
    cursor.execute("DROP TABLE billing_usageevent_before")


def _sqlite_append_only(cursor, table):
    """SQLite applies a changed unique key by rebuilding the table, which drops its triggers
    (migration 0002's): they are made again, as they were, after each rebuild."""
    for op, detail in (("UPDATE", " rejected; record a correction instead"), ("DELETE", " rejected")):
        cursor.execute(
            f"CREATE TRIGGER IF NOT EXISTS {table}_no_{op.lower()} BEFORE {op} ON {table} "
            f"BEGIN SELECT RAISE(ABORT, '{table} is append-only: {op}{detail}'); END"
        )


def usage_triggers_after_reverse_rebuild(apps, schema_editor):
    if schema_editor.connection.vendor == "sqlite":
        with schema_editor.connection.cursor() as cursor:
            _sqlite_append_only(cursor, "billing_usageevent")


def partition(apps, schema_editor):
    connection = schema_editor.connection
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            _sqlite_append_only(cursor, ARCHIVE_LOG)
            _sqlite_append_only(cursor, "billing_usageevent")
            return
        cursor.execute(
            f"CREATE TRIGGER {ARCHIVE_LOG}_append_only BEFORE UPDATE OR DELETE ON {ARCHIVE_LOG} "
            "FOR EACH ROW EXECUTE FUNCTION billing_reject_change()"
        )
        cursor.execute("SELECT min(period), max(period) FROM billing_usageevent")
        first, last = cursor.fetchone()
        _set_aside(cursor)
        cursor.execute("CREATE SEQUENCE billing_usageevent_id_seq_by_month AS bigint")
        cursor.execute(
            "CREATE TABLE billing_usageevent (id bigint NOT NULL DEFAULT "
            f"nextval('billing_usageevent_id_seq_by_month'), {COLUMN_DDL}, "
            "CONSTRAINT billing_usageevent_pkey PRIMARY KEY (id, period)) PARTITION BY RANGE (period)"
        )
        # Every month that has rows, and the months an event may arrive in from today on (the
        # beat task keeps three ahead; ingest creates a missing one itself).
        today = period_of(datetime.now(UTC))
        month = min(filter(None, (first, previous_period(today))))
        last_needed = max(filter(None, (last, today)))
        for _ in range(3):
            last_needed = next_period(last_needed)
        while month <= last_needed:
            create_partition(cursor, month)
            month = next_period(month)
        _finish(cursor, sequence_owner=True)


def unpartition(apps, schema_editor):
    connection = schema_editor.connection
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            for op in ("update", "delete"):
                cursor.execute(f"DROP TRIGGER IF EXISTS {ARCHIVE_LOG}_no_{op}")
            return
        cursor.execute(f"DROP TRIGGER IF EXISTS {ARCHIVE_LOG}_append_only ON {ARCHIVE_LOG}")
        _set_aside(cursor)
        cursor.execute(
            "CREATE TABLE billing_usageevent (id bigint NOT NULL GENERATED BY DEFAULT AS IDENTITY, "
            f"{COLUMN_DDL}, CONSTRAINT billing_usageevent_pkey PRIMARY KEY (id))"
        )
        _finish(cursor, sequence_owner=False)


class Migration(migrations.Migration):
    dependencies = [
        ("billing", "0008_freeze_invoice_tax_rate_and_due_date"),
    ]

    operations = [
        # Reversed last, after the reverse of the key change rebuilt the table on SQLite.
        migrations.RunPython(migrations.RunPython.noop, usage_triggers_after_reverse_rebuild),
        migrations.CreateModel(
            name="LedgerArchiveRecord",
            fields=[
                ("id", models.UUIDField(default=core.ids.uuid7, editable=False, primary_key=True, serialize=False)),
                ("period", models.DateField(help_text="first day of the month")),
                (
                    "action",
                    models.CharField(
                        choices=[
                            ("archived", "Archived (detached)"),
                            ("restored", "Restored (re-attached)"),
                            ("dropped", "Dropped after export"),
                        ],
                        max_length=16,
                    ),
                ),
                ("partition", models.CharField(help_text="the partition's table name", max_length=100)),
                (
                    "location",
                    models.CharField(help_text="schema.table of the detached rows, or the export file", max_length=300),
                ),
                ("rows", models.BigIntegerField()),
                ("quantity_micro", models.BigIntegerField(help_text="sum of GPU-microseconds in the partition")),
                ("first_id", models.BigIntegerField(blank=True, null=True)),
                ("last_id", models.BigIntegerField(blank=True, null=True)),
                ("export_path", models.CharField(blank=True, max_length=500)),
                ("export_sha256", models.CharField(blank=True, max_length=64)),
                ("actor", models.CharField(max_length=200)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
            ],
            options={
                "ordering": ["created_at"],
            },
        ),
        migrations.RemoveConstraint(
            model_name="usageevent",
            name="billing_usage_event_part_unique",
        ),
        migrations.AlterField(
            model_name="usagedispute",
            name="usage_event",
            field=models.OneToOneField(
                db_constraint=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="dispute",
                to="billing.usageevent",
            ),
        ),
        migrations.AddConstraint(
            model_name="usageevent",
            constraint=models.UniqueConstraint(
                fields=("event_id", "part", "period"), name="billing_usage_event_part_period_unique"
            ),
        ),
        migrations.AddIndex(
            model_name="ledgerarchiverecord",
            index=models.Index(fields=["period", "created_at"], name="billing_archive_period_idx"),
        ),
        migrations.RunPython(partition, unpartition),
    ]
