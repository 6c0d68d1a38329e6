"""Seed price-book version 1 from core/reference/economics.csv (sources kept on each row)."""

from datetime import UTC, datetime

from django.db import migrations

EFFECTIVE_FROM = datetime(2020, 1, 1, tzinfo=UTC)  # before any usage the ledger can hold


def seed(apps, schema_editor):
    from billing.pricebook import default_price_rows

    PriceBookEntry = apps.get_model("billing", "PriceBookEntry")
    db = schema_editor.connection.alias
    if PriceBookEntry.objects.using(db).filter(version=1).exists():
        return
    PriceBookEntry.objects.using(db).bulk_create(
        PriceBookEntry(version=1, unit="gpu_hour", effective_from=EFFECTIVE_FROM, **row) for row in default_price_rows()
    )


class Migration(migrations.Migration):
    dependencies = [("billing", "0002_append_only_triggers")]
    operations = [migrations.RunPython(seed, migrations.RunPython.noop)]
