"""Append-only is enforced by the database itself (triggers), on SQLite and PostgreSQL."""

import uuid
from datetime import UTC, date, datetime
from decimal import Decimal

import pytest
from django.db import DatabaseError, connections, transaction

from billing.models import Invoice, InvoiceLine, PriceBookEntry, UsageEvent
from billing.services.runs import run_billing

from .conftest import LEDGER_DBS, make_event

pytestmark = pytest.mark.django_db(databases=LEDGER_DBS)


def _rejected(sql: str, params=()) -> bool:
    try:
        with transaction.atomic(using="ledger"), connections["ledger"].cursor() as cursor:
            cursor.execute(sql, params)
    except DatabaseError:
        return True
    return False


@pytest.mark.parametrize(
    "table",
    ["billing_usageevent", "billing_pricebookentry", "billing_billingrun", "billing_adjustment", "billing_slapolicy"],
)
def test_update_and_delete_fail_at_the_database(ingest, node_id, table):
    tenant = uuid.uuid4()
    event = make_event(tenant_id=tenant, start=datetime(2026, 9, 3, tzinfo=UTC))
    ingest([event])
    run_billing(period=date(2026, 9, 1), finalize=False, actor="test")
    from billing.services.credits import record_sla_credit

    # the credit names the metered allocation: an allocation nobody knows cannot be credited
    record_sla_credit(
        tenant_id=tenant,
        allocation_id=uuid.UUID(event["allocation_id"]),
        node_id=node_id,
        start=datetime(2026, 9, 3, tzinfo=UTC),
        end=datetime(2026, 9, 3, 1, tzinfo=UTC),
        gpus=8,
        reason="xid 79",
        incident_id="inc-1",
        sku="h100-sxm-8x",
    )
    assert _rejected(f"UPDATE {table} SET id = id")
    assert _rejected(f"DELETE FROM {table}")
    if connections["ledger"].vendor == "postgresql":
        assert _rejected(f"TRUNCATE {table}")


def test_orm_writes_are_rejected_too(ingest):
    ingest([make_event(tenant_id=uuid.uuid4(), start=datetime(2026, 9, 3, tzinfo=UTC))])
    with pytest.raises(DatabaseError), transaction.atomic(using="ledger"):
        UsageEvent.objects.update(quantity_micro=0)
    with pytest.raises(DatabaseError), transaction.atomic(using="ledger"):
        PriceBookEntry.objects.filter(sku="h100-sxm-8x").update(unit_price=0)
    assert UsageEvent.objects.get().quantity_micro == 480 * 10**6


@pytest.mark.unverified  # voids an invoice with no re-issue: its usage is then on no live invoice
def test_finalized_invoice_may_only_be_voided(ingest):
    tenant = uuid.uuid4()
    ingest([make_event(tenant_id=tenant, start=datetime(2026, 9, 3, tzinfo=UTC))])
    run_billing(period=date(2026, 9, 1), finalize=True, actor="test", now=datetime(2026, 10, 2, tzinfo=UTC))
    invoice = Invoice.objects.get()
    assert invoice.status == "finalized" and invoice.number == "HANGAR-000001"
    for change in ({"total": 0}, {"number": "X-1"}, {"status": "draft"}):
        with pytest.raises(DatabaseError), transaction.atomic(using="ledger"):
            Invoice.objects.filter(pk=invoice.pk).update(**change)
    with pytest.raises(DatabaseError), transaction.atomic(using="ledger"):
        InvoiceLine.objects.filter(invoice=invoice).update(amount=0)
    with pytest.raises(DatabaseError), transaction.atomic(using="ledger"):
        InvoiceLine.objects.filter(invoice=invoice).delete()
    with pytest.raises(DatabaseError), transaction.atomic(using="ledger"):
        Invoice.objects.filter(pk=invoice.pk).delete()
    Invoice.objects.filter(pk=invoice.pk).update(status="void")
    with pytest.raises(DatabaseError), transaction.atomic(using="ledger"):
        Invoice.objects.filter(pk=invoice.pk).update(status="finalized")


def _finalized_invoice(ingest) -> Invoice:
    tenant = uuid.uuid4()
    ingest([make_event(tenant_id=tenant, start=datetime(2026, 9, 3, tzinfo=UTC))])
    run_billing(period=date(2026, 9, 1), finalize=True, actor="test", now=datetime(2026, 10, 2, tzinfo=UTC))
    invoice = Invoice.objects.get()
    assert invoice.status == "finalized" and invoice.tax_rate_percent is not None and invoice.due_on is not None
    return invoice


@pytest.mark.unverified  # voids an invoice with no re-issue: its usage is then on no live invoice
def test_a_finalized_invoices_tax_rate_and_due_date_are_frozen(ingest):
    invoice = _finalized_invoice(ingest)
    for change in (
        {"tax_rate_percent": Decimal("19.00")},
        {"due_on": date(2027, 1, 1)},
        {"status": "void", "tax_rate_percent": Decimal("19.00")},  # voiding is no way round it
        {"status": "void", "due_on": date(2027, 1, 1)},
    ):
        with pytest.raises(DatabaseError), transaction.atomic(using="ledger"):
            Invoice.objects.filter(pk=invoice.pk).update(**change)
    Invoice.objects.filter(pk=invoice.pk).update(status="void", void_reason="re-issue")
    voided = Invoice.objects.get(pk=invoice.pk)
    assert (voided.status, voided.tax_rate_percent, voided.due_on) == ("void", invoice.tax_rate_percent, invoice.due_on)
    with pytest.raises(DatabaseError), transaction.atomic(using="ledger"):
        Invoice.objects.filter(pk=invoice.pk).update(due_on=None)


def test_a_drafts_tax_rate_and_due_date_may_still_change(ingest):
    ingest([make_event(tenant_id=uuid.uuid4(), start=datetime(2026, 9, 3, tzinfo=UTC))])
    run_billing(period=date(2026, 9, 1), finalize=False, actor="test")
    draft = Invoice.objects.get()
    assert Invoice.objects.filter(pk=draft.pk).update(tax_rate_percent=Decimal("7.50"), due_on=date(2026, 11, 1))


@pytest.mark.postgres
@pytest.mark.unverified  # voids an invoice by hand
def test_postgres_guard_refuses_clearing_the_frozen_tax_rate_and_due_date(ingest):
    """IS DISTINCT FROM in the PL/pgSQL guard: setting a frozen figure to NULL is a change too."""
    invoice = _finalized_invoice(ingest)
    assert connections["ledger"].vendor == "postgresql"
    for column in ("tax_rate_percent", "due_on"):
        assert _rejected(f"UPDATE billing_invoice SET {column} = NULL WHERE id = %s", [invoice.pk])
        assert _rejected(f"UPDATE billing_invoice SET status = 'void', {column} = NULL WHERE id = %s", [invoice.pk])
    assert not _rejected("UPDATE billing_invoice SET status = 'void' WHERE id = %s", [invoice.pk])
