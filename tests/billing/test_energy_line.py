"""The pass-through energy line: priced when the price book has an energy price (per facility
kWh), informational otherwise; worked numbers, a mid-month price change, and cross-tenant checks."""

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

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
