"""The demo's billing step: invoices that add up, idempotent on a second run."""

import io

import pytest

from billing.models import Invoice, UsageDispute, UsageEvent
from devtools.services.demo_billing import seed_demo_billing
from fleet.models import Node

LEDGER_DBS = ["default", "ledger"]

pytestmark = pytest.mark.django_db(databases=LEDGER_DBS)


def test_demo_billing_seeds_invoices_that_add_up(small_fleet):
    seed_demo_billing(io.StringIO())
    events = UsageEvent.objects.count()
    assert events > 5000
    invoices = list(Invoice.objects.all())
    assert {i.status for i in invoices} == {"finalized", "draft"}
    for invoice in invoices:
        assert invoice.total == sum(line.amount for line in invoice.lines.all())
    assert any(line.kind == "sla_credit" for i in invoices for line in i.lines.all())
    assert not UsageDispute.objects.exists()  # usage with its grants and allocation history
    finalized = {i.pk: i.total for i in invoices if i.status == "finalized"}
    out = io.StringIO()
    seed_demo_billing(out)
    assert "0 new" in out.getvalue() and UsageEvent.objects.count() == events
    assert {i.pk: i.total for i in Invoice.objects.filter(status="finalized")} == finalized


def test_demo_bills_only_skus_the_fleet_has(small_fleet):
    seed_demo_billing(io.StringIO())
    fleet_skus = set(Node.objects.values_list("node_type__slug", flat=True))
    assert set(UsageEvent.objects.values_list("sku", flat=True)) <= fleet_skus
