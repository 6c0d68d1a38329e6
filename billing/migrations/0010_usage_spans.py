"""Usage spans: each (month, allocation, node, tenant)'s first start, last end and highest id,
kept by a trigger on the usage table (billing.models.UsageSpan).

PostgreSQL: one statement-level trigger on the partitioned table, reading the statement's
inserted rows as a transition table (one grouped upsert per INSERT or COPY, not one per row;
in key order, so two statements never wait on each other's spans in opposite orders). SQLite:
a row trigger. Created before the spans of the rows already stored are written, in the same
transaction: the trigger's lock holds inserts back until both are committed, so no row is
missed between them (meter ingest waits meanwhile: 56 s for the 50 M-row benchmark ledger; agents
re-send). Archived months (billing.partitions) get their spans too: they can be restored.
"""

from django.db import migrations, models

from billing.partitions import ARCHIVE_SCHEMA, archived_tables

SPAN_COLUMNS = "period, allocation_id, node_id, tenant_id, first_start, last_end, last_id"
KEY = "period, allocation_id, node_id, tenant_id"
GROUPED = f'SELECT {KEY}, min(start), max("end"), max(id) FROM {{source}} GROUP BY {KEY}'

POSTGRES_FORWARD = [
    f"""CREATE OR REPLACE FUNCTION billing_widen_usage_spans() RETURNS trigger LANGUAGE plpgsql AS $$
       BEGIN
         INSERT INTO billing_usagespan ({SPAN_COLUMNS})
         {GROUPED.format(source="inserted")} ORDER BY {KEY}
         ON CONFLICT ({KEY}) DO UPDATE SET
           first_start = least(billing_usagespan.first_start, excluded.first_start),
           last_end = greatest(billing_usagespan.last_end, excluded.last_end),
           last_id = greatest(billing_usagespan.last_id, excluded.last_id);
         RETURN NULL;
       END $$""",
    "CREATE TRIGGER billing_usageevent_spans AFTER INSERT ON billing_usageevent "
    "REFERENCING NEW TABLE AS inserted FOR EACH STATEMENT EXECUTE FUNCTION billing_widen_usage_spans()",
]
POSTGRES_BACKWARD = [
    "DROP TRIGGER IF EXISTS billing_usageevent_spans ON billing_usageevent",
    "DROP FUNCTION IF EXISTS billing_widen_usage_spans()",
]
SQLITE_FORWARD = [
    f"""CREATE TRIGGER billing_usageevent_spans AFTER INSERT ON billing_usageevent
        BEGIN
          INSERT INTO billing_usagespan ({SPAN_COLUMNS})
          VALUES (NEW.period, NEW.allocation_id, NEW.node_id, NEW.tenant_id, NEW.start, NEW."end", NEW.id)
          ON CONFLICT ({KEY}) DO UPDATE SET
            first_start = min(first_start, excluded.first_start),
            last_end = max(last_end, excluded.last_end),
            last_id = max(last_id, excluded.last_id);
        END""",
]
SQLITE_BACKWARD = ["DROP TRIGGER IF EXISTS billing_usageevent_spans"]


def _run(statements_by_vendor, *, backfill: bool):
    def run(apps, schema_editor):
        connection = schema_editor.connection
        statements = statements_by_vendor.get(connection.vendor)
        if statements is None:
            raise RuntimeError(f"no usage-span trigger for {connection.vendor}")
        for statement in statements:
            schema_editor.execute(statement, params=None)  # None: "%" in PL/pgSQL is not a placeholder
        if not backfill:
            return
        sources = ["billing_usageevent"]
        if connection.vendor == "postgresql":
            sources += [f"{ARCHIVE_SCHEMA}.{name}" for name in archived_tables(connection).values()]
        for source in sources:
            schema_editor.execute(f"INSERT INTO billing_usagespan ({SPAN_COLUMNS}) {GROUPED.format(source=source)}")

    return run


class Migration(migrations.Migration):
    dependencies = [
        ("billing", "0009_partition_usage_by_month"),
    ]

    operations = [
        migrations.CreateModel(
            name="UsageSpan",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("period", models.DateField()),
                ("allocation_id", models.UUIDField()),
                ("node_id", models.UUIDField()),
                ("tenant_id", models.UUIDField()),
                ("first_start", models.DateTimeField()),
                ("last_end", models.DateTimeField()),
                ("last_id", models.BigIntegerField(help_text="the highest usage-event id of the pair in the month")),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("period", "allocation_id", "node_id", "tenant_id"), name="billing_usage_span_unique"
                    )
                ],
            },
        ),
        migrations.RunPython(
            _run({"sqlite": SQLITE_FORWARD, "postgresql": POSTGRES_FORWARD}, backfill=True),
            _run({"sqlite": SQLITE_BACKWARD, "postgresql": POSTGRES_BACKWARD}, backfill=False),
        ),
    ]
