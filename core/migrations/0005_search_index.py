from django.db import migrations, models


def compare_values_bytewise(apps, schema_editor):
    """PostgreSQL: compare `value` byte-wise, so `value >= q AND value < q || U+10FFFF` is
    exactly "starts with q" and the b-tree below serves it in index order, whatever the
    database's default collation (en_US ignores punctuation, which would break prefixes).
    Done before the index is built, as an index takes its column's collation. SQLite's
    default collation (BINARY) is already byte-wise."""
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute('ALTER TABLE core_searchentry ALTER COLUMN value TYPE varchar(255) COLLATE "C"')


class Migration(migrations.Migration):
    dependencies = [
        ("core", "0004_loop_clock_and_beat_lease"),
    ]

    operations = [
        migrations.CreateModel(
            name="SearchEntry",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                (
                    "kind",
                    models.CharField(help_text="which identifier: hostname, gpu_uuid, drive_serial, …", max_length=32),
                ),
                (
                    "object_id",
                    models.CharField(help_text="primary key of the object the identifier is on", max_length=64),
                ),
                (
                    "value",
                    models.CharField(help_text="the identifier, normalised (core.search.normalise)", max_length=255),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(fields=("kind", "object_id"), name="core_searchentry_kind_object_unique")
                ],
            },
        ),
        migrations.RunPython(compare_values_bytewise, migrations.RunPython.noop, elidable=False),
        migrations.AddIndex(
            model_name="searchentry",
            index=models.Index(fields=["value", "kind", "object_id"], name="core_searchentry_lookup_idx"),
        ),
        migrations.AddIndex(
            model_name="searchentry",
            index=models.Index(fields=["kind", "value"], name="core_search_kind_value_idx"),
        ),
    ]
