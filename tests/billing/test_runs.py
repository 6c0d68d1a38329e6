"""Billing runs: deterministic, atomic, finalized invoices frozen, late usage and credits."""

import uuid
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from unittest import mock

import pytest
from django.core.management import call_command
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from billing.models import BillingRun, Invoice, InvoiceCounter
from billing.services import runs
from billing.services.credits import record_sla_credit
from billing.services.runs import BillingRunError, run_billing

from .conftest import LEDGER_DBS, make_event

pytestmark = pytest.mark.django_db(databases=LEDGER_DBS)
SEPT, OCT = date(2026, 9, 1), date(2026, 10, 1)
AFTER_SEPT = datetime(2026, 10, 2, tzinfo=UTC)
AFTER_OCT = datetime(2026, 11, 2, tzinfo=UTC)


def _sept_events(tenant, n=5, **kw):
    return [
        make_event(tenant_id=tenant, start=datetime(2026, 9, 10, tzinfo=UTC) + timedelta(minutes=i), **kw)
        for i in range(n)
    ]


def test_running_twice_gives_the_identical_output_hash(ingest):
    a, b = uuid.uuid4(), uuid.uuid4()
    ingest(_sept_events(a) + _sept_events(b, sku="a100-sxm-8x"))
    first = run_billing(period=SEPT, finalize=False, actor="test").run
    second = run_billing(period=SEPT, finalize=False, actor="test").run
    assert first.output_hash == second.output_hash
    assert Invoice.objects.count() == 2
    assert {i.status for i in Invoice.objects.all()} == {"draft"}


def test_finalized_period_never_changes_and_numbers_are_gapless(ingest):
    tenants = sorted([uuid.uuid4() for _ in range(3)], key=str)
    for tenant in tenants:
        ingest(_sept_events(tenant))
    final = run_billing(period=SEPT, finalize=True, actor="test", now=AFTER_SEPT)
    assert final.created
    numbers = sorted(Invoice.objects.values_list("number", flat=True))
    assert numbers == ["HANGAR-000001", "HANGAR-000002", "HANGAR-000003"]
    before = list(Invoice.objects.values_list("id", "total", "number", "updated_at"))
    again = run_billing(period=SEPT, finalize=True, actor="test", now=AFTER_SEPT)
    assert not again.created and again.run.pk == final.run.pk
    assert list(Invoice.objects.values_list("id", "total", "number", "updated_at")) == before
    assert InvoiceCounter.objects.get().last_number == 3


def test_late_event_after_finalization_lands_on_next_invoice(ingest):
    tenant = uuid.uuid4()
    ingest(_sept_events(tenant, n=2))
    run_billing(period=SEPT, finalize=True, actor="test", now=AFTER_SEPT)
    sept_invoice = Invoice.objects.get(period=SEPT)
    late = make_event(tenant_id=tenant, start=datetime(2026, 9, 30, 23, 0, tzinfo=UTC), seconds=3600)
    ingest([late, make_event(tenant_id=tenant, start=datetime(2026, 10, 3, tzinfo=UTC), seconds=3600)])
    run_billing(period=OCT, finalize=True, actor="test", now=AFTER_OCT)
    sept_invoice.refresh_from_db()
    assert sept_invoice.lines.count() == 1 and sept_invoice.total == Decimal("0.63")  # 16 GPU-min × 2.35
    oct_lines = {line.kind: line for line in Invoice.objects.get(period=OCT).lines.all()}
    assert oct_lines["late_usage"].usage_period == SEPT
    assert oct_lines["late_usage"].quantity == Decimal("8") and oct_lines["late_usage"].amount == Decimal("18.80")
    assert oct_lines["usage"].amount == Decimal("18.80")
    # Never billed a third time:
    nov = run_billing(period=date(2026, 11, 1), finalize=False, actor="test").run
    assert nov.invoices == 0


def test_periods_finalize_in_order_and_only_when_closed(ingest):
    tenant = uuid.uuid4()
    ingest(_sept_events(tenant) + [make_event(tenant_id=tenant, start=datetime(2026, 10, 3, tzinfo=UTC))])
    with pytest.raises(BillingRunError) as err:
        run_billing(period=OCT, finalize=True, actor="test", now=AFTER_OCT)
    assert err.value.code == "earlier_period_open"
    with pytest.raises(BillingRunError) as err:
        run_billing(period=SEPT, finalize=True, actor="test", now=datetime(2026, 9, 20, tzinfo=UTC))
    assert err.value.code == "period_open"
    assert not BillingRun.objects.exists()


def test_a_run_killed_midway_leaves_no_partial_invoice(ingest):
    ingest(_sept_events(uuid.uuid4()))
    with mock.patch.object(runs, "_finalize", side_effect=SystemExit("worker killed")), pytest.raises(SystemExit):
        run_billing(period=SEPT, finalize=True, actor="test", now=AFTER_SEPT)
    assert not Invoice.objects.exists() and not BillingRun.objects.exists()
    assert not InvoiceCounter.objects.filter(last_number__gt=0).exists()


def test_sla_credit_becomes_a_credit_line(ingest):
    tenant, allocation, node = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    ingest(
        [make_event(tenant_id=tenant, allocation_id=allocation, start=datetime(2026, 9, 10, tzinfo=UTC), seconds=7200)]
    )
    kwargs = dict(
        tenant_id=tenant,
        allocation_id=allocation,
        node_id=node,
        gpus=8,
        reason="GPU fell off the bus",
        start=datetime(2026, 9, 10, 2, tzinfo=UTC),
        end=datetime(2026, 9, 10, 3, tzinfo=UTC),
        incident_id="inc-42",
    )
    [credit] = record_sla_credit(**kwargs)
    assert [c.pk for c in record_sla_credit(**kwargs)] == [credit.pk]  # recorded once
    assert credit.sku == "h100-sxm-8x"  # learned from the ledger's metering
    run_billing(period=SEPT, finalize=False, actor="test")
    lines = {line.kind: line for line in Invoice.objects.get().lines.all()}
    assert lines["usage"].amount == Decimal("37.60")  # 16 GPU-h × 2.35
    assert lines["sla_credit"].amount == Decimal("-18.80")  # 8 GPU-h × 2.35 × factor 1
    assert Invoice.objects.get().total == Decimal("18.80")


def test_run_billing_command(ingest):
    ingest(_sept_events(uuid.uuid4()))
    from io import StringIO

    out = StringIO()
    call_command("run_billing", "--period", "2026-09", stdout=out)
    assert "1 invoice(s), draft" in out.getvalue()
    with pytest.raises(Exception, match="YYYY-MM"):
        call_command("run_billing", "--period", "2026-13")


@settings(
    max_examples=5,
    deadline=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
# GPUs up to 7, so the fractional extra stays within the grant's 8 GPUs × seconds.
@given(
    st.lists(
        st.tuples(
            st.integers(0, 2),
            st.integers(1, 7),
            st.integers(1, 3600 * 5),
            st.integers(0, 10**6),
            st.sampled_from(["h100-sxm-8x", "a100-sxm-8x", "h200-sxm-8x"]),
        ),
        min_size=1000,
        max_size=1000,
    )
)
def test_money_sums_exact_to_the_cent(ingest, django_db_blocker, rows):
    """Whatever 1,000 events hold, each line = round_half_even(Σ exact GPU-µs × price) and the
    invoice total is the exact sum of its lines."""
    from billing.models import UsageEvent
    from billing.services.rating import prices

    tenants = [uuid.uuid4() for _ in range(3)]
    events = []
    # Eight nodes' usage side by side: a node's GPUs are billed once per second, so the events run
    # one after another on eight lanes (125 events of at most 5 h: 26 days, inside September).
    lanes = [timedelta(0)] * 8
    for i, (t, gpus, seconds, micros, sku) in enumerate(rows):
        lane = i % 8
        if lanes[lane] + timedelta(seconds=seconds + 1) > timedelta(days=27):
            lanes[lane] = timedelta(0)
        offset = lanes[lane] + timedelta(microseconds=micros)
        lanes[lane] += timedelta(seconds=seconds + 1)
        event = make_event(
            tenant_id=tenants[t],
            start=datetime(2026, 9, 2, tzinfo=UTC) + offset,
            seconds=seconds,
            gpus=gpus,
            sku=sku,
        )
        event["quantity"] = str(Decimal(gpus * seconds) + Decimal(micros % 1000) / 1000)
        events.append(event)
    ingest(events)
    price = {sku: p.unit_price for sku, p in prices(1).items()}
    expected: dict = {}
    for event in events:
        key = (uuid.UUID(event["tenant_id"]), event["sku"])
        expected[key] = expected.get(key, Decimal(0)) + Decimal(event["quantity"])
    run_billing(period=SEPT, finalize=False, actor="test")
    for invoice in Invoice.objects.filter(tenant_id__in=tenants):
        lines = list(invoice.lines.all())
        for line in lines:
            exact = expected[(invoice.tenant_id, line.sku)] * price[line.sku] / 3600
            assert line.amount == exact.quantize(Decimal("0.01"), rounding="ROUND_HALF_EVEN")
        assert invoice.total == sum(line.amount for line in lines)
    assert UsageEvent.objects.filter(tenant_id__in=tenants).count() == 1000


def test_periodic_refresh_and_close(ingest):
    tenant = uuid.uuid4()
    ingest(_sept_events(tenant) + [make_event(tenant_id=tenant, start=datetime(2026, 10, 1, 1, tzinfo=UTC))])
    during_grace = datetime(2026, 10, 1, 3, tzinfo=UTC)
    assert runs.finalize_due(now=during_grace, actor="test") == []
    refreshed = runs.refresh_drafts(now=during_grace, actor="test")
    assert [o.run.period for o in refreshed] == [SEPT, OCT]  # September still open in its grace period
    closed = runs.finalize_due(now=during_grace + timedelta(hours=6), actor="test")
    assert [o.run.period for o in closed] == [SEPT]
    assert Invoice.objects.get(period=SEPT).status == "finalized"
    assert [o.run.period for o in runs.refresh_drafts(now=during_grace + timedelta(hours=7), actor="test")] == [OCT]
