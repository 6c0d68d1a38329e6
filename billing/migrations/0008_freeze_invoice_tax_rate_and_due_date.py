"""A finalized invoice's tax rate and due date are frozen by the database too.

0006 added `tax_rate_percent` and `due_on`, copied onto an invoice when it is finalized; the
invoice triggers of 0002 list the columns a finalized invoice keeps and did not know them. This
re-creates that one guard (SQLite trigger, PostgreSQL trigger function) with both columns added;
backwards restores 0002's list. A later migration that rebuilds billing_invoice on SQLite must
re-create its triggers from `SQLITE_INVOICE_FROZEN` here, not from 0002's.
"""

import importlib

from django.db import migrations

_base = importlib.import_module("billing.migrations.0002_append_only_triggers")

FROZEN_INVOICE_COLUMNS = (*_base.FROZEN_INVOICE_COLUMNS, "tax_rate_percent", "due_on")


def sqlite_invoice_frozen(columns) -> list[str]:
    return [
        "DROP TRIGGER IF EXISTS billing_invoice_frozen",
        f"""CREATE TRIGGER billing_invoice_frozen BEFORE UPDATE ON billing_invoice
        WHEN OLD.status = 'void' OR (OLD.status = 'finalized' AND (NEW.status <> 'void' OR
             {" OR ".join(f"NEW.{c} IS NOT OLD.{c}" for c in columns)}))
        BEGIN SELECT RAISE(ABORT, 'a finalized invoice may only be voided; nothing else changes'); END""",
    ]


def postgres_invoice_guard(columns) -> list[str]:
    # Replacing the function is enough: the trigger of 0002 calls it by name.
    return [
        f"""CREATE OR REPLACE FUNCTION billing_invoice_guard() RETURNS trigger LANGUAGE plpgsql AS $$
       BEGIN
         IF TG_OP = 'DELETE' THEN
           IF OLD.status <> 'draft' THEN RAISE EXCEPTION 'only draft invoices may be deleted'; END IF;
           RETURN OLD;
         END IF;
         IF OLD.status = 'void' OR (OLD.status = 'finalized' AND (NEW.status <> 'void' OR
            {" OR ".join(f"NEW.{c} IS DISTINCT FROM OLD.{c}" for c in columns)})) THEN
           RAISE EXCEPTION 'a finalized invoice may only be voided; nothing else changes';
         END IF;
         RETURN NEW;
       END $$"""
    ]


SQLITE_INVOICE_FROZEN = sqlite_invoice_frozen(FROZEN_INVOICE_COLUMNS)
FORWARD = {"sqlite": SQLITE_INVOICE_FROZEN, "postgresql": postgres_invoice_guard(FROZEN_INVOICE_COLUMNS)}
BACKWARD = {
    "sqlite": sqlite_invoice_frozen(_base.FROZEN_INVOICE_COLUMNS),
    "postgresql": postgres_invoice_guard(_base.FROZEN_INVOICE_COLUMNS),
}


class Migration(migrations.Migration):
    dependencies = [("billing", "0007_merge_energy_line_and_invoice_tax")]
    operations = [migrations.RunPython(_base._run(FORWARD), _base._run(BACKWARD))]
