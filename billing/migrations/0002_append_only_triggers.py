"""Append-only enforced by the database, not only by Python (docs/design, "Billing").

- price book, usage events, adjustments, billing runs: UPDATE and DELETE (and TRUNCATE on
  PostgreSQL) are rejected;
- invoices: free while `draft`; a finalized invoice may only become `void` (no other column
  may change); a void one never changes; only drafts may be deleted;
- invoice lines: no insert, update or delete once their invoice is not a draft.
"""

from django.db import migrations

APPEND_ONLY = ("billing_pricebookentry", "billing_usageevent", "billing_adjustment", "billing_billingrun")
# Columns a finalized invoice must keep when it is voided (everything but status/updated_at).
FROZEN_INVOICE_COLUMNS = (
    "tenant_id",
    "period",
    "issuer",
    "number",
    "currency",
    "total",
    "billing_run_id",
    "created_at",
    "finalized_at",
)

SQLITE_FORWARD = [
    *[
        f"""CREATE TRIGGER {t}_no_update BEFORE UPDATE ON {t}
          BEGIN SELECT RAISE(ABORT, '{t} is append-only: UPDATE rejected; record a correction instead'); END"""
        for t in APPEND_ONLY
    ],
    *[
        f"""CREATE TRIGGER {t}_no_delete BEFORE DELETE ON {t}
          BEGIN SELECT RAISE(ABORT, '{t} is append-only: DELETE rejected'); END"""
        for t in APPEND_ONLY
    ],
    f"""CREATE TRIGGER billing_invoice_frozen BEFORE UPDATE ON billing_invoice
        WHEN OLD.status = 'void' OR (OLD.status = 'finalized' AND (NEW.status <> 'void' OR
             {" OR ".join(f"NEW.{c} IS NOT OLD.{c}" for c in FROZEN_INVOICE_COLUMNS)}))
        BEGIN SELECT RAISE(ABORT, 'a finalized invoice may only be voided; nothing else changes'); END""",
    """CREATE TRIGGER billing_invoice_no_delete BEFORE DELETE ON billing_invoice WHEN OLD.status <> 'draft'
       BEGIN SELECT RAISE(ABORT, 'only draft invoices may be deleted'); END""",
    """CREATE TRIGGER billing_invoiceline_frozen_insert BEFORE INSERT ON billing_invoiceline
       WHEN (SELECT status FROM billing_invoice WHERE id = NEW.invoice_id) <> 'draft'
       BEGIN SELECT RAISE(ABORT, 'lines of a finalized invoice are frozen'); END""",
    """CREATE TRIGGER billing_invoiceline_frozen_update BEFORE UPDATE ON billing_invoiceline
       WHEN (SELECT status FROM billing_invoice WHERE id = OLD.invoice_id) <> 'draft'
         OR (SELECT status FROM billing_invoice WHERE id = NEW.invoice_id) <> 'draft'
       BEGIN SELECT RAISE(ABORT, 'lines of a finalized invoice are frozen'); END""",
    """CREATE TRIGGER billing_invoiceline_frozen_delete BEFORE DELETE ON billing_invoiceline
       WHEN (SELECT status FROM billing_invoice WHERE id = OLD.invoice_id) <> 'draft'
       BEGIN SELECT RAISE(ABORT, 'lines of a finalized invoice are frozen'); END""",
]
SQLITE_BACKWARD = [
    *[f"DROP TRIGGER IF EXISTS {t}_no_update" for t in APPEND_ONLY],
    *[f"DROP TRIGGER IF EXISTS {t}_no_delete" for t in APPEND_ONLY],
    "DROP TRIGGER IF EXISTS billing_invoice_frozen",
    "DROP TRIGGER IF EXISTS billing_invoice_no_delete",
    "DROP TRIGGER IF EXISTS billing_invoiceline_frozen_insert",
    "DROP TRIGGER IF EXISTS billing_invoiceline_frozen_update",
    "DROP TRIGGER IF EXISTS billing_invoiceline_frozen_delete",
]

POSTGRES_FORWARD = [
    """CREATE OR REPLACE FUNCTION billing_reject_change() RETURNS trigger LANGUAGE plpgsql AS $$
       BEGIN
         RAISE EXCEPTION '% is append-only: % rejected; record a correction instead', TG_TABLE_NAME, TG_OP;
       END $$""",
    *[
        f"""CREATE TRIGGER {t}_append_only BEFORE UPDATE OR DELETE ON {t}
          FOR EACH ROW EXECUTE FUNCTION billing_reject_change()"""
        for t in APPEND_ONLY
    ],
    *[
        f"""CREATE TRIGGER {t}_no_truncate BEFORE TRUNCATE ON {t}
          FOR EACH STATEMENT EXECUTE FUNCTION billing_reject_change()"""
        for t in (*APPEND_ONLY, "billing_invoice", "billing_invoiceline")
    ],
    f"""CREATE OR REPLACE FUNCTION billing_invoice_guard() RETURNS trigger LANGUAGE plpgsql AS $$
       BEGIN
         IF TG_OP = 'DELETE' THEN
           IF OLD.status <> 'draft' THEN RAISE EXCEPTION 'only draft invoices may be deleted'; END IF;
           RETURN OLD;
         END IF;
         IF OLD.status = 'void' OR (OLD.status = 'finalized' AND (NEW.status <> 'void' OR
            {" OR ".join(f"NEW.{c} IS DISTINCT FROM OLD.{c}" for c in FROZEN_INVOICE_COLUMNS)})) THEN
           RAISE EXCEPTION 'a finalized invoice may only be voided; nothing else changes';
         END IF;
         RETURN NEW;
       END $$""",
    """CREATE TRIGGER billing_invoice_guard BEFORE UPDATE OR DELETE ON billing_invoice
       FOR EACH ROW EXECUTE FUNCTION billing_invoice_guard()""",
    """CREATE OR REPLACE FUNCTION billing_invoiceline_guard() RETURNS trigger LANGUAGE plpgsql AS $$
       BEGIN
         IF TG_OP <> 'INSERT' AND (SELECT status FROM billing_invoice WHERE id = OLD.invoice_id) <> 'draft' THEN
           RAISE EXCEPTION 'lines of a finalized invoice are frozen';
         END IF;
         IF TG_OP <> 'DELETE' AND (SELECT status FROM billing_invoice WHERE id = NEW.invoice_id) <> 'draft' THEN
           RAISE EXCEPTION 'lines of a finalized invoice are frozen';
         END IF;
         IF TG_OP = 'DELETE' THEN RETURN OLD; END IF;
         RETURN NEW;
       END $$""",
    """CREATE TRIGGER billing_invoiceline_guard BEFORE INSERT OR UPDATE OR DELETE ON billing_invoiceline
       FOR EACH ROW EXECUTE FUNCTION billing_invoiceline_guard()""",
]
POSTGRES_BACKWARD = [
    *[f"DROP TRIGGER IF EXISTS {t}_append_only ON {t}" for t in APPEND_ONLY],
    *[
        f"DROP TRIGGER IF EXISTS {t}_no_truncate ON {t}"
        for t in (*APPEND_ONLY, "billing_invoice", "billing_invoiceline")
    ],
    "DROP TRIGGER IF EXISTS billing_invoice_guard ON billing_invoice",
    "DROP TRIGGER IF EXISTS billing_invoiceline_guard ON billing_invoiceline",
    "DROP FUNCTION IF EXISTS billing_reject_change()",
    "DROP FUNCTION IF EXISTS billing_invoice_guard()",
    "DROP FUNCTION IF EXISTS billing_invoiceline_guard()",
]


def _run(statements_by_vendor):
    def run(apps, schema_editor):
        statements = statements_by_vendor.get(schema_editor.connection.vendor)
        if statements is None:
            raise RuntimeError(f"no append-only triggers for {schema_editor.connection.vendor}")
        for statement in statements:
            schema_editor.execute(statement, params=None)  # None: "%" in PL/pgSQL is not a placeholder

    return run


class Migration(migrations.Migration):
    dependencies = [("billing", "0001_ledger")]
    operations = [
        migrations.RunPython(
            _run({"sqlite": SQLITE_FORWARD, "postgresql": POSTGRES_FORWARD}),
            _run({"sqlite": SQLITE_BACKWARD, "postgresql": POSTGRES_BACKWARD}),
        ),
    ]
