"""The independent verifier (billing.verifier): it agrees with the product on real histories
(every test in this directory ends with it, tests/billing/conftest.py), and it is shown here to
catch corrupted invoices, through its command, its page and its nightly task."""

import uuid
from datetime import UTC, date, datetime
from decimal import Decimal
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from billing.models import Invoice, InvoiceLine, VerificationRun
from billing.services.runs import run_billing
from billing.verifier import verify_billing

from .conftest import LEDGER_DBS, make_event

pytestmark = pytest.mark.django_db(databases=LEDGER_DBS)
SEP = date(2026, 9, 1)
NOW = datetime(2026, 12, 1, tzinfo=UTC)


def _draft(ingest):
    tenant = uuid.uuid4()
    ingest([make_event(tenant_id=tenant, start=datetime(2026, 9, 3, tzinfo=UTC), seconds=3600)])  # 8 GPU-h
    run_billing(period=SEP, finalize=False, actor="test", now=NOW)
    return Invoice.objects.get(tenant_id=tenant)


def test_a_clean_ledger_verifies_and_the_command_says_so(ingest):
    _draft(ingest)
    out = StringIO()
    call_command("verify_billing", stdout=out)
    assert "1 live invoices" in out.getvalue() and "every invoice recomputes exactly" in out.getvalue()
    last = VerificationRun.objects.get()
    assert (last.invoices, last.difference_count) == (1, 0)


@pytest.mark.unverified
def test_a_corrupted_line_is_found_and_the_command_fails(ingest, operator_client):
    invoice = _draft(ingest)
    assert invoice.total == Decimal("18.80")
    InvoiceLine.objects.filter(invoice=invoice).update(amount=Decimal("18.81"))
    Invoice.objects.filter(pk=invoice.pk).update(total=Decimal("18.81"))
    report = verify_billing()
    [difference] = report.differences
    assert difference.what == "lines do not recompute"
    assert "= 18.80" in difference.expected and "= 18.81" in difference.found
    out = StringIO()
    with pytest.raises(CommandError) as failed:
        call_command("verify_billing", stdout=out)
    assert failed.value.returncode == 1 and "1 differences" in str(failed.value)
    assert "DIFFERENCE" in out.getvalue() and "lines do not recompute" in out.getvalue()
    page = operator_client.get("/billing/verification/")
    assert page.status_code == 200
    assert b"1 difference" in page.content and b"lines do not recompute" in page.content


@pytest.mark.unverified
def test_a_total_that_is_not_its_lines_and_a_lost_invoice_are_found(ingest):
    invoice = _draft(ingest)
    Invoice.objects.filter(pk=invoice.pk).update(total=Decimal("1.00"))
    assert [d.what for d in verify_billing().differences] == ["total is not the sum of its lines"]
    Invoice.objects.filter(pk=invoice.pk).update(total=Decimal("18.80"))
    run_billing(period=SEP, finalize=True, actor="test", now=NOW)
    Invoice.objects.filter(pk=invoice.pk).update(status="void")  # voided, never re-issued
    [lost] = verify_billing().differences
    assert "is on no live invoice" in lost.what and "18.80" in lost.expected


@pytest.mark.unverified
def test_the_nightly_task_fails_on_a_difference_and_is_registered(ingest):
    from billing.tasks import verify_invoices
    from billing.verification import VerificationFailed
    from core.periodic import PERIODIC_TASKS

    assert any(spec.task == "billing.tasks.verify_invoices" for spec in PERIODIC_TASKS)
    invoice = _draft(ingest)
    assert verify_invoices() == 1
    InvoiceLine.objects.filter(invoice=invoice).update(quantity_micro=1)
    with pytest.raises(VerificationFailed):
        verify_invoices()
    assert VerificationRun.objects.order_by("-started_at").first().difference_count == 1


def test_the_page_is_for_operators_and_says_when_nothing_ran(client, operator_client, django_user_model):
    assert b"No verification has run yet" in operator_client.get("/billing/verification/").content
    member = django_user_model.objects.create_user("member", password="pw-123456789")
    client.force_login(member)
    assert client.get("/billing/verification/").status_code in (302, 403)
