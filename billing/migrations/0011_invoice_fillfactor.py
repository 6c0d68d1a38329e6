"""Draft invoices are updated in place by every billing run (the hourly refresh rewrites each
draft's total, run and time): half of each page is left free so those updates stay on their
page (heap-only tuples), without a new entry in each of the table's five indexes. PostgreSQL
only; rows already stored keep their pages until rewritten, new ones are laid out so."""

from django.db import migrations


def _set(value: str | None):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor != "postgresql":
            return
        if value is None:
            schema_editor.execute("ALTER TABLE billing_invoice RESET (fillfactor)")
        else:
            schema_editor.execute(f"ALTER TABLE billing_invoice SET (fillfactor = {value})")

    return run


class Migration(migrations.Migration):
    dependencies = [("billing", "0010_usage_spans")]
    operations = [migrations.RunPython(_set("50"), _set(None))]
