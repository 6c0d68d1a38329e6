"""The pass-through energy line: priced when the price book has an energy price (per facility
kWh), informational otherwise; worked numbers, a mid-month price change, and cross-tenant checks."""

import os
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
from django.contrib.auth import get_user_model
from django.db import transaction
from django.test import Client
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from billing.models import Invoice, PriceBookEntry
from billing.services.energy_lines import ENERGY_SKU
from billing.services.runs import run_billing
from fleet.services.energy import record_counters
from tenants.models import Membership

from .conftest import LEDGER_DBS, _tenant_client, granted, make_event, store_events

pytestmark = pytest.mark.django_db(databases=LEDGER_DBS)
SEPT = date(2026, 9, 1)
T0 = datetime(2026, 9, 10, 10, tzinfo=UTC)
PUE = Decimal("1.58")  # the seeded site's PUE: facility.csv pue_industry_average


def _energy_price(price: str, since: datetime, version: int = 2):
    # set-up: the price book gains an energy row in a new version (how the operator prices energy)
    return PriceBookEntry.objects.create(
        version=version,
        sku=ENERGY_SKU,
        unit="kwh",
        unit_price=Decimal(price),
        effective_from=since,
        source="test: utility tariff",
    )


def _eight_kw(node, start: datetime, hours: int = 1):
    """The node's BMC counter at 8 kW for `hours` from `start`, as the heartbeat records it."""
    for h in range(hours + 1):
        record_counters(
            node_id=node.pk,
            now=start + timedelta(hours=h),
            node_kw=node.node_type.node_kw,
            host_kw=None,
            wall_energy_j=8000 * 3600 * h,
            wall_source="bmc",
            gpu_energy_mj={},
        )


def _acme_hour_at_8_kw(ingest, metered_node, tenant, hours=1):
    ingest([make_event(tenant_id=str(tenant.pk), start=T0, seconds=3600 * hours)])
    _eight_kw(metered_node, T0, hours)


def _invoice(tenant):
    return Invoice.objects.using("ledger").get(tenant_id=tenant.pk, period=SEPT)


def test_with_an_energy_price_the_invoice_charges_facility_kwh_at_it(ingest, metered_node, tenants, acme_api):
    acme, _ = tenants
    _acme_hour_at_8_kw(ingest, metered_node, acme)
    _energy_price("0.1234", datetime(2026, 1, 1, tzinfo=UTC))
    run_billing(period=SEPT, finalize=False, actor="test")
    invoice = _invoice(acme)
    usage, energy = invoice.lines.all()
    # 8 kWh IT × PUE 1.58 = 12.640 facility kWh; × 0.1234 USD/kWh = 1.559776 → 1.56 (half-even)
    assert (energy.kind, energy.sku, energy.unit) == ("energy", ENERGY_SKU, "kwh")
    assert energy.quantity == Decimal("12.640") == 8 * PUE
    assert energy.unit_price == Decimal("0.1234") and energy.price_version == 2
    assert energy.amount == Decimal("1.56")
    assert invoice.total == usage.amount + Decimal("1.56")
    # the same line through the tenant's API, with its unit
    lines = acme_api.get(f"/api/v1/invoices/{invoice.pk}").json()["lines"]
    assert [(line["kind"], line["unit"], line["quantity"], line["amount"]) for line in lines][1] == (
        "energy",
        "kwh",
        "12.640000",
        "1.56",
    )
    # and on the portal's invoice page: the line, and the energy card saying it is charged
    user = get_user_model().objects.create_user("acme-payer", password="x")
    Membership.objects.create(user=user, tenant=acme, role="member")
    portal = Client()
    portal.force_login(user)
    page = portal.get(f"/portal/invoices/{invoice.pk}/").content.decode()
    # the line shows three decimals so quantity × unit price visibly gives the amount
    assert "12.640 kWh" in page and "0.1234 USD / kWh" in page
    assert 'as line <span id="invoice-energy-line">2</span>' in page and "(informational)" not in page


def test_without_an_energy_price_energy_stays_informational(ingest, metered_node, tenants):
    acme, _ = tenants
    _acme_hour_at_8_kw(ingest, metered_node, acme)
    run_billing(period=SEPT, finalize=False, actor="test")
    invoice = _invoice(acme)
    assert [line.kind for line in invoice.lines.all()] == ["usage"]
    user = get_user_model().objects.create_user("acme-fin", password="x")
    Membership.objects.create(user=user, tenant=acme, role="member")
    portal = Client()
    portal.force_login(user)
    page = portal.get(f"/portal/invoices/{invoice.pk}/").content.decode()
    assert "(informational)" in page and "Energy is not charged on this invoice" in page
    assert 'id="invoice-energy-it">8.0 kWh<' in page


def test_a_price_change_mid_month_splits_the_energy_line(ingest, metered_node, tenants):
    acme, _ = tenants
    # two hours at 8 kW either side of 10 September 11:00, when the price goes from 0.10 to 0.20
    _acme_hour_at_8_kw(ingest, metered_node, acme, hours=2)
    _energy_price("0.10", datetime(2026, 1, 1, tzinfo=UTC), version=2)
    _energy_price("0.20", T0 + timedelta(hours=1), version=3)
    run_billing(period=SEPT, finalize=False, actor="test")
    energy = [line for line in _invoice(acme).lines.all() if line.kind == "energy"]
    assert [(e.quantity, e.unit_price, e.amount) for e in energy] == [
        (Decimal("12.640"), Decimal("0.10"), Decimal("1.26")),  # 12.640 × 0.10 = 1.264 → 1.26
        (Decimal("12.640"), Decimal("0.20"), Decimal("2.53")),  # 12.640 × 0.20 = 2.528 → 2.53
    ]
    assert energy[0].end == energy[1].start == T0 + timedelta(hours=1)


def test_a_tenant_is_charged_only_its_own_energy_and_cannot_read_anothers(
    ingest, metered_node, small_fleet, tenants, acme_api, globex_api
):
    from fleet.models import Node

    acme, globex = tenants
    _acme_hour_at_8_kw(ingest, metered_node, acme)
    other = Node.objects.exclude(pk=metered_node.pk).order_by("hostname").first()
    # globex rents another node for the same hour, at 8 kW too, through its own grant
    events = [make_event(tenant_id=str(globex.pk), start=T0, seconds=1800)]
    from .conftest import record_history

    record_history(events, other)
    store_events(other.pk, granted(events, other.pk))
    _eight_kw(other, T0)
    _energy_price("0.1234", datetime(2026, 1, 1, tzinfo=UTC))
    run_billing(period=SEPT, finalize=False, actor="test")
    acme_energy = [line for line in _invoice(acme).lines.all() if line.kind == "energy"]
    globex_energy = [line for line in _invoice(globex).lines.all() if line.kind == "energy"]
    assert [line.quantity for line in acme_energy] == [Decimal("12.640")]
    assert [line.quantity for line in globex_energy] == [Decimal("6.320")]  # half an hour of its node
    # globex cannot open acme's invoice (404, not 403: it does not exist for globex)
    assert globex_api.get(f"/api/v1/invoices/{_invoice(acme).pk}").status_code == 404
    assert acme_api.get(f"/api/v1/invoices/{_invoice(acme).pk}").status_code == 200


def test_a_meter_event_cannot_bill_the_energy_sku(metered_node, tenants):
    """The attacker's request: an agent metering 'energy' as if it were an instance type."""
    from billing.services.ingest import IngestValidationError, ingest_meter_events

    acme, _ = tenants
    _energy_price("0.1234", datetime(2026, 1, 1, tzinfo=UTC))
    event = make_event(tenant_id=str(acme.pk), start=T0, seconds=3600, sku=ENERGY_SKU)
    with pytest.raises(IngestValidationError) as refused:
        ingest_meter_events(node_id=metered_node.pk, events=[event], received_at=T0 + timedelta(hours=2))
    assert [e["field"] for e in refused.value.errors] == ["events[0].sku"]
    assert _tenant_client(acme).get("/api/v1/invoices").json()["results"] == []


def test_a_reissue_keeps_the_energy_it_billed(ingest, metered_node, tenants, operator_user):
    """Energy is part of a run's frozen scope: a re-issue with nothing changed carries the same
    energy line, even after more energy readings arrived for the month."""
    from billing.services.corrections import reissue_invoice

    acme = tenants[0]
    _energy_price("0.10", datetime(2026, 1, 1, tzinfo=UTC))
    _acme_hour_at_8_kw(ingest, metered_node, acme)
    run_billing(period=SEPT, finalize=True, actor="test", now=datetime(2026, 12, 1, tzinfo=UTC))
    original = _invoice(acme)
    [energy] = original.lines.filter(kind="energy")
    # usage and readings of the same month that arrive after the close (billed later, as late usage)
    ingest([make_event(tenant_id=str(acme.pk), start=T0 + timedelta(hours=5), seconds=3600 * 3)])
    _eight_kw(metered_node, T0 + timedelta(hours=5), hours=3)
    again = reissue_invoice(by=operator_user, invoice_id=original.pk, reason="address")
    [kept] = again.lines.filter(kind="energy")
    assert (kept.quantity, kept.amount) == (energy.quantity, energy.amount)
    assert again.total == original.total


def test_estimated_energy_is_labelled_as_estimated(ingest, metered_node, tenants):
    """A node without a wall-energy counter: its IT kWh are estimated from the GPUs' counters plus
    a host share, and the invoice line says so instead of citing the nodes' energy counters."""
    acme = tenants[0]
    _energy_price("0.10", datetime(2026, 1, 1, tzinfo=UTC))
    ingest([make_event(tenant_id=str(acme.pk), start=T0, seconds=3600)])
    for h in range(2):
        record_counters(
            node_id=metered_node.pk,
            now=T0 + timedelta(hours=h),
            node_kw=metered_node.node_type.node_kw,
            host_kw=Decimal("1.5"),
            wall_energy_j=None,
            wall_source="",
            gpu_energy_mj={i: 700_000 * 3600 * h for i in range(8)},
        )
    run_billing(period=SEPT, finalize=False, actor="test")
    [line] = _invoice(acme).lines.filter(kind="energy")
    assert "estimated" in line.note and "energy counters" not in line.note


def test_a_price_change_inside_an_hour_bills_that_hour_once_at_the_price_at_its_start(ingest, metered_node, tenants):
    """Issue 40, finding 5: a price change at 12:30 billed the 12:00 hour twice. An hour's energy is
    priced by the version in force at the hour's start; the change applies from the next hour."""
    acme, _ = tenants
    # 10:00–12:00 at 8 kW (12.640 facility kWh an hour); the price goes 0.10 → 0.20 at 11:30
    _acme_hour_at_8_kw(ingest, metered_node, acme, hours=2)
    _energy_price("0.10", datetime(2026, 1, 1, tzinfo=UTC), version=2)
    _energy_price("0.20", T0 + timedelta(hours=1, minutes=30), version=3)
    run_billing(period=SEPT, finalize=False, actor="test")
    energy = [line for line in _invoice(acme).lines.all() if line.kind == "energy"]
    # both hours started before 11:30: 25.280 kWh × 0.10 = 2.528 → 2.53 (not 2.53 + 12.640 × 0.20)
    assert [(e.quantity, e.unit_price, e.amount) for e in energy] == [
        (Decimal("25.280"), Decimal("0.10"), Decimal("2.53"))
    ]
    assert energy[0].end == T0 + timedelta(hours=2)  # the 0.20 span starts at 12:00, with no energy in it


def test_a_price_change_inside_the_first_hour_moves_the_next_hour_only(ingest, metered_node, tenants):
    acme, _ = tenants
    _acme_hour_at_8_kw(ingest, metered_node, acme, hours=2)
    _energy_price("0.10", datetime(2026, 1, 1, tzinfo=UTC), version=2)
    _energy_price("0.20", T0 + timedelta(minutes=30), version=3)  # 10:30: the 11:00 hour is at 0.20
    run_billing(period=SEPT, finalize=True, actor="test")
    energy = [line for line in _invoice(acme).lines.all() if line.kind == "energy"]
    assert [(e.quantity, e.unit_price, e.amount, e.start, e.end) for e in energy] == [
        (
            Decimal("12.640"),
            Decimal("0.10"),
            Decimal("1.26"),
            datetime(2026, 9, 1, tzinfo=UTC),
            T0 + timedelta(hours=1),
        ),
        (
            Decimal("12.640"),
            Decimal("0.20"),
            Decimal("2.53"),
            T0 + timedelta(hours=1),
            datetime(2026, 10, 1, tzinfo=UTC),
        ),
    ]


@pytest.mark.unverified
def test_the_verifier_finds_an_hour_billed_twice_and_an_hour_at_the_wrong_price(ingest, metered_node, tenants):
    from billing.models import InvoiceLine
    from billing.verifier import verify_billing

    acme, _ = tenants
    _acme_hour_at_8_kw(ingest, metered_node, acme, hours=2)
    _energy_price("0.10", datetime(2026, 1, 1, tzinfo=UTC), version=2)
    _energy_price("0.20", T0 + timedelta(hours=1), version=3)
    run_billing(period=SEPT, finalize=False, actor="test")
    first, second = [line for line in _invoice(acme).lines.all() if line.kind == "energy"]
    assert verify_billing().ok
    # the old behaviour: the second line reaching back into the 10:00 hour
    InvoiceLine.objects.filter(pk=second.pk).update(start=T0)
    whats = [d.what for d in verify_billing().differences]
    assert any("billed twice" in w for w in whats)
    assert any("not priced by the version in force at its start" in w for w in whats)  # 10:00 was at 0.10
    # a line that does not start on a whole hour
    InvoiceLine.objects.filter(pk=second.pk).update(start=T0 + timedelta(minutes=90))
    assert any("does not cover whole hours" in d.what for d in verify_billing().differences)


class _Rollback(Exception):
    pass


@settings(
    max_examples=40 if os.environ.get("HYPOTHESIS_PROFILE") == "ci" else 8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    changes=st.lists(
        # price changes anywhere from two hours before to two hours after three metered hours, to the
        # second: on the hour, inside an hour, two inside one hour
        st.integers(min_value=-2 * 3600, max_value=5 * 3600),
        min_size=1,
        max_size=3,
        unique=True,
    ),
    finalize=st.booleans(),
)
@example(changes=[5400], finalize=False)  # the case: a change half-way through an hour
@example(changes=[1800, 2700], finalize=True)  # two changes inside one hour
def test_for_any_price_change_instants_each_metered_kwh_is_billed_exactly_once(
    ingest, metered_node, tenants, changes, finalize
):
    """Metamorphic: wherever the price changes, the energy lines' kWh add up to the metered kWh
    (3 h × 8 kW IT × PUE 1.58 = 37.920 facility kWh), each line's hours at the price in force at
    their start (the verifier, run here, checks the prices and that no hour is on two lines)."""
    from billing.verifier import verify_billing

    acme, _ = tenants
    prices = [Decimal("0.10"), Decimal("0.20"), Decimal("0.35"), Decimal("0.05")]
    try:
        with transaction.atomic(using="ledger"), transaction.atomic():
            _acme_hour_at_8_kw(ingest, metered_node, acme, hours=3)
            _energy_price(str(prices[0]), datetime(2026, 1, 1, tzinfo=UTC), version=2)
            instants = sorted(T0 + timedelta(seconds=s) for s in changes)
            for i, moment in enumerate(instants):
                _energy_price(str(prices[i + 1]), moment, version=3 + i)
            run_billing(period=SEPT, finalize=finalize, actor="test")
            energy = [line for line in _invoice(acme).lines.all() if line.kind == "energy"]
            assert sum(e.quantity for e in energy) == 3 * 8 * PUE == Decimal("37.920")

            def price_at(hour):  # the hand rule: the price in force at the hour's start
                return ([prices[0]] + [prices[i + 1] for i, m in enumerate(instants) if m <= hour])[-1]

            hours = [T0 + timedelta(hours=h) for h in range(3)]
            expected = sum(8 * PUE * price_at(h) for h in hours)
            assert sum(e.quantity * e.unit_price for e in energy) == expected
            report = verify_billing()
            assert report.ok, [str(d) for d in report.differences]
            raise _Rollback
    except _Rollback:
        pass
