"""Billing's tenant notifications: `invoice.finalized` and `credit_note.issued`
(tenants.notifications has the catalogue, the router and the channels).

Invoices and credit notes live in the ledger database, the outbox in the control plane's: no
transaction spans both. The events are therefore written right after the ledger transaction
commits (`transaction.on_commit(using="ledger")`), in a control-plane transaction of their own:
a rolled-back finalization sends nothing, and each event's dedup key (the document's id) makes a
second attempt harmless.
"""

from django.db import transaction

from tenants.notifications import emit_tenant_event

LEDGER = "ledger"


def _after_ledger_commit(events: list[dict]) -> None:
    def write():
        with transaction.atomic():
            for event in events:
                emit_tenant_event(**event)

    transaction.on_commit(write, using=LEDGER)


def invoices_finalized(rows) -> None:
    """rows: (invoice id, tenant id, number, period, total, due_on) of invoices just finalized."""
    _after_ledger_commit(
        [
            {
                "tenant_id": tenant_id,
                "event_type": "invoice.finalized",
                "dedup_key": f"invoice:{invoice_id}:finalized",
                "data": {
                    "invoice": str(invoice_id),
                    "number": number,
                    "period": str(period)[:7],
                    "total": str(total),
                    "due_on": str(due_on) if due_on else None,
                },
            }
            for invoice_id, tenant_id, number, period, total, due_on in rows
        ]
    )


def credit_note_issued(note) -> None:
    _after_ledger_commit(
        [
            {
                "tenant_id": note.tenant_id,
                "event_type": "credit_note.issued",
                "dedup_key": f"credit_note:{note.pk}:issued",
                "data": {
                    "credit_note": str(note.pk),
                    "number": note.number,
                    "invoice": str(note.invoice_id),
                    "total": str(note.total),
                    "currency": note.currency,
                    "reason": note.reason[:200],
                },
            }
        ]
    )
