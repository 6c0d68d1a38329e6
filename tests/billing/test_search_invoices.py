"""Invoice numbers in the search (docs/search.md): numbered by a billing run in the ledger (a
bulk update, no post_save), searchable once the ledger commits; a lost control-plane write is
logged and repaired by the rebuild, never a failed billing run."""

import uuid
from datetime import UTC, date, datetime, timedelta
from unittest import mock

import pytest
from django.core.management import call_command
from django.db import DatabaseError

from billing.models import Invoice
from billing.services.runs import run_billing
from core.models import SearchEntry

from .conftest import LEDGER_DBS, make_event

pytestmark = pytest.mark.django_db(databases=LEDGER_DBS)
SEPT = date(2026, 9, 1)


def _events(tenant):
    return [
        make_event(tenant_id=tenant, start=datetime(2026, 9, 10, tzinfo=UTC) + timedelta(minutes=i)) for i in range(3)
    ]


def test_a_finalized_invoice_is_found_by_its_number(ingest, ops_api, django_capture_on_commit_callbacks):
    ingest(_events(uuid.uuid4()))
    with django_capture_on_commit_callbacks(using="ledger", execute=True):
        run_billing(period=SEPT, finalize=True, actor="test", now=datetime(2026, 10, 2, tzinfo=UTC))
    invoice = Invoice.objects.get()
    hits = ops_api.get("/api/v1/ops/search", {"q": invoice.number.lower()}).json()["results"]
    assert [(h["kind"], h["id"], h["match"]) for h in hits] == [("invoice_number", str(invoice.pk), "exact")]
    assert ops_api.get("/api/v1/ops/search", {"q": "HANGAR-00"}).json()["results"][0]["match"] == "prefix"


def test_an_unreachable_control_plane_never_fails_the_run(ingest, ops_api, django_capture_on_commit_callbacks):
    ingest(_events(uuid.uuid4()))
    with (
        mock.patch("core.search.index._write", side_effect=DatabaseError("control plane down")),
        django_capture_on_commit_callbacks(using="ledger", execute=True),
    ):
        outcome = run_billing(period=SEPT, finalize=True, actor="test", now=datetime(2026, 10, 2, tzinfo=UTC))
    assert outcome.created and Invoice.objects.get().number
    assert not SearchEntry.objects.filter(kind="invoice_number").exists()
    call_command("rebuild_search_index", "billing.Invoice")
    assert SearchEntry.objects.filter(kind="invoice_number").count() == 1
