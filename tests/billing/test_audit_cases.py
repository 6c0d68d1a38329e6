"""The cases an auditor recomputed (issue: invoices a finance team can audit), with their figures.

Prices: H100 2.35 /GPU-h and A100 1.50 /GPU-h in price book v1 (core/reference/economics.csv)."""

import csv
import io
import uuid
from datetime import UTC, date, datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal

import pytest
from django.db import connections

from billing.models import Adjustment, Invoice, PriceBookEntry, SlaPolicy
from billing.services.credits import CreditError, record_sla_credit
from billing.services.runs import BillingRunError, run_billing

from .conftest import LEDGER_DBS, make_event

pytestmark = pytest.mark.django_db(databases=LEDGER_DBS)
NOW = datetime(2026, 12, 1, tzinfo=UTC)  # every month below has ended and is past its grace
MAY, JUN, JUL, AUG, SEP, OCT = (date(2026, m, 1) for m in range(5, 11))


def gpu_hours(tenant, start, hours, *, allocation=None, sku="h100-sxm-8x", gpus=8):
    """An event of `hours` GPU-hours on `gpus` GPUs starting at `start`."""
    return make_event(
        tenant_id=tenant, allocation_id=allocation, start=start, seconds=int(hours * 3600 / gpus), gpus=gpus, sku=sku
    )


def at(month: date, day: int, hour: int = 0) -> datetime:
    return datetime(month.year, month.month, day, hour, tzinfo=UTC)


def finalize(period):
    return run_billing(period=period, finalize=True, actor="test", now=NOW)


def invoice(tenant, period) -> Invoice:
    return Invoice.objects.exclude(status="void").get(tenant_id=tenant, period=period)


def test_late_usage_for_a_never_finalized_month_is_billed_once(ingest):
    """June and July finalized; 8 GPU-h arrive for May. May bills 18.80; August does not bill it again."""
    tenant = uuid.uuid4()
    ingest([gpu_hours(tenant, at(JUN, 3), 8), gpu_hours(tenant, at(JUL, 3), 8)])
    finalize(JUN), finalize(JUL)
    ingest([gpu_hours(tenant, at(MAY, 20), 8), gpu_hours(tenant, at(AUG, 5), 16)])
    with pytest.raises(BillingRunError) as refused:
        finalize(AUG)
    assert refused.value.code == "earlier_period_open"
    finalize(MAY)
    assert invoice(tenant, MAY).total == Decimal("18.80")
    finalize(AUG)
    august = invoice(tenant, AUG)
    assert august.total == Decimal("37.60")
    assert [line.kind for line in august.lines.all()] == ["usage"]


def _price_v2(price: str, since: datetime, sku="h100-sxm-8x", version=2):
    return PriceBookEntry.objects.create(
        version=version, sku=sku, unit_price=Decimal(price), effective_from=since, source="test: price change"
    )


def test_a_price_change_mid_month_prices_each_interval_at_its_own_version(ingest):
    """v2 sets H100 at 3.00 from 15 July: 10 GPU-h on 10 July + 10 GPU-h on 20 July = 23.50 + 30.00."""
    tenant = uuid.uuid4()
    _price_v2("3.00", at(JUL, 15))
    ingest([gpu_hours(tenant, at(JUL, 10), 10), gpu_hours(tenant, at(JUL, 20), 10)])
    finalize(JUL)
    july = invoice(tenant, JUL)
    assert july.total == Decimal("53.50")
    first, second = july.lines.all()
    assert (first.price_version, first.unit_price, first.amount) == (1, Decimal("2.35"), Decimal("23.50"))
    assert (first.start, first.end) == (at(JUL, 1), at(JUL, 15))
    assert (second.price_version, second.unit_price, second.amount) == (2, Decimal("3.00"), Decimal("30.00"))
    assert (second.start, second.end) == (at(JUL, 15), at(AUG, 1))


def test_an_interval_across_a_price_change_is_split_there(ingest):
    tenant = uuid.uuid4()
    _price_v2("3.00", at(JUL, 15))
    ingest([make_event(tenant_id=tenant, start=at(JUL, 14, 23), seconds=7200, gpus=8)])  # 8 GPU-h each side
    run_billing(period=JUL, finalize=False, actor="test")
    lines = list(invoice(tenant, JUL).lines.all())
    assert [(line.quantity, line.amount) for line in lines] == [
        (Decimal("8"), Decimal("18.80")),
        (Decimal("8"), Decimal("24.00")),
    ]
    assert sum(line.quantity_micro for line in lines) == 16 * 3600 * 10**6


def test_late_usage_is_priced_at_its_own_months_prices(ingest):
    """A late 10 GPU-h from 11 July lands on August's invoice at July's 2.35 (23.50), not August's 3.00."""
    tenant = uuid.uuid4()
    _price_v2("3.00", at(AUG, 1))
    ingest([gpu_hours(tenant, at(JUL, 2), 8)])
    finalize(JUL)
    ingest([gpu_hours(tenant, at(JUL, 11), 10), gpu_hours(tenant, at(AUG, 3), 10)])
    finalize(AUG)
    lines = {line.kind: line for line in invoice(tenant, AUG).lines.all()}
    assert lines["late_usage"].usage_period == JUL and lines["late_usage"].amount == Decimal("23.50")
    assert "late usage for 2026-07" in lines["late_usage"].description
    assert lines["usage"].amount == Decimal("30.00")


def test_usage_screen_prices_like_the_draft_invoice(ingest, acme_api, tenants):
    """With v2 (3.00 from 15 July) in force, a 9.00 price effective 2027-01-01 (v3) does not reach
    December: usage and draft both say 30.00 for 10 GPU-h."""
    acme = tenants[0]
    _price_v2("3.00", at(JUL, 15))
    _price_v2("9.00", datetime(2027, 1, 1, tzinfo=UTC), version=3)
    ingest([gpu_hours(acme.pk, datetime(2026, 12, 1, 0, tzinfo=UTC), 10)])
    body = acme_api.get("/api/v1/usage", {"start": "2026-12-01T00:00:00Z", "end": "2027-01-01T00:00:00Z"}).json()
    [row] = body["results"]
    assert (row["amount"], row["unit_price"], row["price_version"]) == ("30.00", "3.000000", 2)
    run_billing(period=date(2026, 12, 1), finalize=False, actor="test")
    assert invoice(acme.pk, date(2026, 12, 1)).total == Decimal("30.00")


def _credit(tenant, allocation, node, start, end, gpus=8, incident="inc-1", **kw):
    return record_sla_credit(
        tenant_id=tenant,
        allocation_id=allocation,
        node_id=node,
        start=start,
        end=end,
        gpus=gpus,
        reason="node pulled: XID 79",
        incident_id=incident,
        **kw,
    )


def test_sla_credit_is_capped_at_the_allocations_charge_and_never_exceeds_the_invoice(ingest, node_id):
    """A 10-hour window for 8 GPUs (188.00 uncapped) against 18.80 of usage: credit −18.80, total 0.00."""
    tenant, allocation, busy = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    ingest([gpu_hours(tenant, at(SEP, 2), 8, allocation=allocation)])
    [credit] = _credit(tenant, allocation, node_id, at(SEP, 10), at(SEP, 10, 10))
    assert credit.amount == Decimal("-188.000000")  # uncapped, as recorded
    finalize(SEP)
    sept = invoice(tenant, SEP)
    sla = sept.lines.get(kind="sla_credit")
    assert sla.amount == Decimal("-18.80") and "capped" in sla.note
    assert sept.total == Decimal("0.00")
    # The cap is per allocation: another allocation's usage on the same invoice does not raise it.
    # (an allocation belongs to one tenant: usage of another tenant under it would be held as disputed)
    other, credited = uuid.uuid4(), uuid.uuid4()
    ingest([gpu_hours(other, at(OCT, 2), 8, allocation=credited), gpu_hours(other, at(OCT, 2), 16, allocation=busy)])
    _credit(other, credited, node_id, at(OCT, 10), at(OCT, 10, 10), incident="inc-2")
    finalize(OCT)
    october = invoice(other, OCT)
    assert october.lines.get(kind="sla_credit").amount == Decimal("-18.80")
    assert october.total == Decimal("37.60")


def test_sla_credit_gpus_are_bounded_by_the_allocations(ingest, node_id):
    tenant, allocation = uuid.uuid4(), uuid.uuid4()
    ingest([gpu_hours(tenant, at(SEP, 2), 8, allocation=allocation)])
    with pytest.raises(CreditError) as too_many:
        _credit(tenant, allocation, node_id, at(SEP, 10), at(SEP, 10, 10), gpus=64)
    assert too_many.value.code == "gpus_exceed_allocation"
    with pytest.raises(CreditError) as unknown:  # a tenant with no usage and no allocation anyone knows
        _credit(uuid.uuid4(), uuid.uuid4(), node_id, at(SEP, 10), at(SEP, 10, 10))
    assert unknown.value.code == "unknown_allocation"
    assert not Adjustment.objects.exists()


def test_sla_window_across_a_month_boundary_is_split(ingest, node_id):
    """30 Sep 22:00 → 1 Oct 04:00: 2 h on September's invoice, 4 h on October's."""
    tenant, allocation = uuid.uuid4(), uuid.uuid4()
    ingest(
        [
            gpu_hours(tenant, at(SEP, 2), 80, allocation=allocation),
            gpu_hours(tenant, at(OCT, 2), 80, allocation=allocation),
        ]
    )
    pieces = _credit(tenant, allocation, node_id, datetime(2026, 9, 30, 22, tzinfo=UTC), at(OCT, 1, 4))
    assert [(p.period, p.end - p.start) for p in pieces] == [(SEP, timedelta(hours=2)), (OCT, timedelta(hours=4))]
    finalize(SEP), finalize(OCT)
    assert invoice(tenant, SEP).lines.get(kind="sla_credit").amount == Decimal("-37.60")  # 16 GPU-h × 2.35
    assert invoice(tenant, OCT).lines.get(kind="sla_credit").amount == Decimal("-75.20")  # 32 GPU-h × 2.35


def test_sla_policy_decides_which_incidents_count_and_is_cited(ingest, node_id):
    tenant, allocation = uuid.uuid4(), uuid.uuid4()
    ingest([gpu_hours(tenant, at(SEP, 2), 80, allocation=allocation)])
    assert _credit(tenant, allocation, node_id, at(SEP, 10), at(SEP, 11), attribution="tenant") == []
    SlaPolicy.objects.create(
        key="gold",
        version=1,
        tenant_id=tenant,
        name="Gold SLA",
        attributions="provider",
        credit_rate=Decimal("0.5"),
        cap_percent=Decimal("10"),
        effective_from=at(SEP, 1),
        source="test contract",
    )
    [credit] = _credit(tenant, allocation, node_id, at(SEP, 10), at(SEP, 10, 1))
    assert credit.sla_policy.key == "gold" and credit.amount == Decimal("-9.400000")  # 8 GPU-h × 2.35 × 0.5
    run_billing(period=SEP, finalize=False, actor="test")
    line = invoice(tenant, SEP).lines.get(kind="sla_credit")
    assert "Gold SLA v1" in line.description and line.rate == Decimal("0.5")
    assert line.amount == Decimal("-9.40")  # under the cap: 10% of 188.00


def test_a_line_reproduces_its_amount_from_what_the_export_shows(ingest, acme_api, tenants):
    """1 GPU-minute of A100 at 1.50 is 0.025 → 0.02 (half-even); GPU-hours to 6 places (0.016667) would not show it."""
    acme = tenants[0]
    ingest(
        [make_event(tenant_id=acme.pk, start=at(SEP, 3), seconds=60, gpus=1, sku="a100-sxm-8x")]
        + [
            make_event(tenant_id=acme.pk, start=at(SEP, 4) + timedelta(seconds=i * 977), seconds=7 + i * 13, gpus=3)
            for i in range(20)
        ]
    )
    run_billing(period=SEP, finalize=False, actor="test")
    listing = acme_api.get("/api/v1/invoices").json()["results"][0]
    rows = list(csv.DictReader(io.StringIO(acme_api.get(f"/api/v1/invoices/{listing['id']}.csv").content.decode())))
    lines = [r for r in rows if r["kind"] != "total"]
    assert lines[0]["gpu_seconds"] == "60.000000" and lines[0]["amount"] == "0.02"
    for row in lines:
        exact = Decimal(row["gpu_seconds"]) * Decimal(row["unit_price"]) * Decimal(row["rate"]) / 3600
        assert exact.quantize(Decimal("0.01"), rounding=ROUND_HALF_EVEN) == Decimal(row["amount"])
    assert Decimal(rows[-1]["amount"]) == sum(Decimal(r["amount"]) for r in lines)


def test_money_is_stored_exactly_on_every_backend(ingest, node_id):
    tenant, allocation = uuid.uuid4(), uuid.uuid4()
    ingest([gpu_hours(tenant, at(SEP, 2), 8, allocation=allocation)])
    _credit(tenant, allocation, node_id, at(SEP, 10), at(SEP, 10) + timedelta(milliseconds=875))
    with connections["ledger"].cursor() as cursor:
        cursor.execute("SELECT amount FROM billing_adjustment")
        [(stored,)] = cursor.fetchall()
    # 8 GPUs × 0.875 s × 2.35 / 3600 = 0.004569444… → 6 places, exactly (text on SQLite, numeric on PostgreSQL)
    assert Decimal(str(stored)) == Decimal("-0.004569") and not isinstance(stored, float)
    assert Adjustment.objects.get().amount == Decimal("-0.004569")


def test_the_worked_invoice_in_the_docs(ingest, node_id):
    """docs/billing.md, "A worked invoice": July 2026 for one tenant comes to 46.20."""
    tenant, allocation = uuid.uuid4(), uuid.uuid4()
    _price_v2("3.00", at(JUL, 15))
    ingest([gpu_hours(tenant, at(JUN, 3), 8, allocation=allocation)])
    finalize(JUN)
    ingest(
        [
            gpu_hours(tenant, at(JUN, 28), 2, allocation=allocation),  # arrives after June closed
            gpu_hours(tenant, at(JUL, 10), 10, allocation=allocation),
            gpu_hours(tenant, at(JUL, 20), 10, allocation=allocation),
        ]
    )
    _credit(tenant, allocation, node_id, at(JUL, 20, 10), at(JUL, 20, 10) + timedelta(minutes=30))
    finalize(JUL)
    july = invoice(tenant, JUL)
    assert [
        (line.kind, line.gpu_seconds, line.unit_price, line.price_version, line.amount) for line in july.lines.all()
    ] == [
        ("late_usage", Decimal("7200"), Decimal("2.35"), 1, Decimal("4.70")),
        ("usage", Decimal("36000"), Decimal("2.35"), 1, Decimal("23.50")),
        ("usage", Decimal("36000"), Decimal("3.00"), 2, Decimal("30.00")),
        ("sla_credit", Decimal("14400"), Decimal("3.00"), 2, Decimal("-12.00")),
    ]
    assert july.total == Decimal("46.20") and july.number == "HANGAR-000002"
