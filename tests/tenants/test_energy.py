"""Energy from the agents' cumulative counters to a tenant's usage, through the real endpoints:
heartbeats in (with a clock the test drives), GET /api/v1/usage and the portal usage page out."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from core.api.agent_tokens import mint_agent_token
from core.formatting import format_kwh, format_number
from fleet.models import Node, NodeEnergyCounter, NodeEnergyHour
from health.api import agent_views as agent_urls
from tenants.models import AllocationNode
from tenants.services.allocation_loop import run_allocation_loop

from .conftest import provision_succeeds

pytestmark = pytest.mark.django_db

PUE = Decimal("1.58")  # the seeded halls' PUE: facility.csv pue_industry_average
GRID = Decimal("0.366")  # facility.csv grid_carbon_intensity_us_average
PRICE = Decimal("0.078")  # economics.csv electricity_price


class Clock:
    def __init__(self, at):
        self.at = at

    def now(self):
        return self.at


@pytest.fixture
def clock(monkeypatch):
    clock = Clock(timezone.now())
    monkeypatch.setattr(agent_urls, "timezone", clock)  # the heartbeat view reads the time from here
    return clock


def _active_allocation(client, started_at, node_count=1):
    created = client.post(
        "/api/v1/allocations",
        {"name": "train", "instance_type": "h100-sxm-8x", "node_count": node_count, "fabric": "isolated"},
        format="json",
        HTTP_IDEMPOTENCY_KEY=f"k-{node_count}-{started_at.isoformat()}",
    )
    assert created.status_code == 202, created.content
    run_allocation_loop()
    provision_succeeds()
    run_allocation_loop()
    alloc_id = created.data["id"]
    assert client.get(f"/api/v1/allocations/{alloc_id}").data["state"] == "active"
    # set-up only: the allocation began at a chosen past moment, so the test's hours are all in the past
    AllocationNode.objects.filter(allocation_id=alloc_id).update(started_at=started_at)
    return alloc_id, list(Node.objects.filter(allocation_memberships__allocation_id=alloc_id))


def _agent(node):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {mint_agent_token(node.pk)}")
    return client


def _beat(agent, clock, at, *, wall_j=None, watts=8000, gpu_mj=None, source="bmc"):
    clock.at = at
    body = {
        "observed_at": at.isoformat().replace("+00:00", "Z"),
        "power_state": "on",
        "gpus": [{"index": i, "power_w": 425.0, **({"energy_mj": gpu_mj[i]} if gpu_mj else {})} for i in range(8)],
    }
    if wall_j is not None or watts is not None:
        body["wall_power"] = {
            "source": source,
            **({"watts": watts} if watts is not None else {}),
            **({"energy_j": wall_j} if wall_j is not None else {}),
        }
    response = agent.post("/api/agent/v1/heartbeat", body, format="json")
    assert response.status_code == 202, response.content
    return response


def _usage(client, start, end):
    response = client.get("/api/v1/usage", {"start": start.isoformat(), "end": end.isoformat()})
    assert response.status_code == 200, response.content
    return response.data["energy"]


def _hour_ago(hours):
    now = timezone.now()
    return now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=hours)


def test_constant_8_kw_for_an_hour_across_an_agent_outage_is_8_kwh_it_and_8_x_pue_facility(
    small_fleet, client_a, clock
):
    t0 = _hour_ago(3)
    alloc_id, (node,) = _active_allocation(client_a, t0)
    agent = _agent(node)
    counter = 1_000_000_000  # the BMC's counter has run for a long time before this
    start = t0 + timedelta(minutes=10)
    _beat(agent, clock, start, wall_j=counter)  # baseline
    _beat(agent, clock, start + timedelta(minutes=10), wall_j=counter + 8000 * 600)
    # the agent is down for 40 minutes: no heartbeats; the counter keeps counting
    _beat(agent, clock, start + timedelta(minutes=50), wall_j=counter + 8000 * 3000)
    _beat(agent, clock, start + timedelta(minutes=60), wall_j=counter + 8000 * 3600)

    rows = [r for r in _usage(client_a, t0 - timedelta(days=1), timezone.now()) if r["allocation_id"] == alloc_id]
    it = sum(Decimal(r["it_kwh"]) for r in rows)
    facility = sum(Decimal(r["facility_kwh"]) for r in rows)
    assert it == Decimal("8.000")
    assert facility == (8 * PUE).quantize(Decimal("0.001"))
    assert sum(Decimal(r["kg_co2e"]) for r in rows) == (8 * PUE * GRID).quantize(Decimal("0.001"))
    assert sum(Decimal(r["energy_cost"]) for r in rows) == (8 * PUE * PRICE).quantize(Decimal("0.01"))
    assert {r["source"] for r in rows} == {"measured"}
    # the outage's energy was spread over the gap's hours, not dropped and not piled into one
    hours = dict(NodeEnergyHour.objects.filter(node=node).values_list("hour", "it_energy_j"))
    assert sum(hours.values()) == 8000 * 3600
    assert hours[t0] == 8000 * 50 * 60 and hours[t0 + timedelta(hours=1)] == 8000 * 10 * 60


def test_gpu_counters_without_a_meter_are_an_estimate_with_the_host_share(small_fleet, client_a, clock):
    t0 = _hour_ago(3)
    alloc_id, (node,) = _active_allocation(client_a, t0)
    agent = _agent(node)
    start = t0 + timedelta(minutes=5)
    base = [10_000_000 * (i + 1) for i in range(8)]
    _beat(agent, clock, start, watts=None, gpu_mj=base)
    # 8 GPUs at 425 W for an hour = 3.4 kWh of GPU energy; the H100 host share adds 4.6 kW (facility.csv)
    _beat(agent, clock, start + timedelta(hours=1), watts=None, gpu_mj=[b + 425 * 3600 * 1000 for b in base])
    (row,) = [r for r in _usage(client_a, t0 - timedelta(days=1), timezone.now()) if r["allocation_id"] == alloc_id]
    assert Decimal(row["it_kwh"]) == Decimal("8.000")
    assert Decimal(row["estimated_kwh"]) == Decimal("8.000") and Decimal(row["measured_kwh"]) == 0
    assert row["source"] == "estimate"
    assert sum(NodeEnergyHour.objects.filter(node=node).values_list("gpu_energy_j", flat=True)) == 8 * 425 * 3600


def test_a_counter_going_backwards_is_a_reset_not_negative_energy(small_fleet, client_a, clock):
    t0 = _hour_ago(3)
    alloc_id, (node,) = _active_allocation(client_a, t0)
    agent = _agent(node)
    start = t0 + timedelta(minutes=5)
    _beat(agent, clock, start, wall_j=500_000_000)
    _beat(agent, clock, start + timedelta(minutes=10), wall_j=500_000_000 + 8000 * 600)
    # BMC reset: the counter restarts from zero and has counted 2 minutes at 8 kW since
    _beat(agent, clock, start + timedelta(minutes=20), wall_j=8000 * 120)
    state = NodeEnergyCounter.objects.get(node=node)
    assert state.resets == 1 and state.last_reset_at is not None
    assert sum(NodeEnergyHour.objects.filter(node=node).values_list("it_energy_j", flat=True)) == 8000 * (600 + 120)
    rows = [r for r in _usage(client_a, t0 - timedelta(days=1), timezone.now()) if r["allocation_id"] == alloc_id]
    assert all(Decimal(r["it_kwh"]) >= 0 for r in rows)


def test_a_reading_above_the_types_maximum_is_refused_and_logged(small_fleet, client_a, clock, caplog):
    t0 = _hour_ago(3)
    _, (node,) = _active_allocation(client_a, t0)
    agent = _agent(node)
    start = t0 + timedelta(minutes=5)
    _beat(agent, clock, start, wall_j=0, watts=8000)
    # 60 kWh in 10 minutes = 360 kW from a 10.2 kW node: impossible
    _beat(agent, clock, start + timedelta(minutes=10), wall_j=60 * 3_600_000, watts=50_000)
    state = NodeEnergyCounter.objects.get(node=node)
    assert state.refused == 1 and "above the 10.20 kW" in state.last_refused_detail
    assert not NodeEnergyHour.objects.filter(node=node).exists()
    assert "refused" in caplog.text
    node.refresh_from_db()
    assert node.wall_power_w == 8000  # the 50 kW instantaneous reading was refused too


def test_energy_is_prorated_when_an_allocation_starts_inside_an_hour(small_fleet, client_a, clock):
    t0 = _hour_ago(3)
    alloc_id, (node,) = _active_allocation(client_a, t0 + timedelta(minutes=30))
    agent = _agent(node)
    _beat(agent, clock, t0, wall_j=0)
    _beat(agent, clock, t0 + timedelta(hours=1), wall_j=8000 * 3600)  # the whole hour at 8 kW
    (row,) = [r for r in _usage(client_a, t0 - timedelta(days=1), timezone.now()) if r["allocation_id"] == alloc_id]
    assert Decimal(row["it_kwh"]) == Decimal("4.000")  # only the half hour the tenant held the node


def test_tenants_see_only_their_own_energy(small_fleet, client_a, client_b, tenant_b, clock):
    t0 = _hour_ago(3)
    alloc_id, (node,) = _active_allocation(client_a, t0)
    agent = _agent(node)
    _beat(agent, clock, t0 + timedelta(minutes=5), wall_j=0)
    _beat(agent, clock, t0 + timedelta(minutes=65), wall_j=8000 * 3600)
    window = (t0 - timedelta(days=1), timezone.now())
    assert [r["allocation_id"] for r in _usage(client_a, *window)] == [alloc_id]
    assert _usage(client_b, *window) == []
    # the other tenant's portal page does not show it either
    from django.contrib.auth import get_user_model
    from django.test import Client

    from tenants.models import Membership

    user = get_user_model().objects.create_user("globex-user", password="x")
    Membership.objects.create(user=user, tenant=tenant_b, role="member")
    portal = Client()
    portal.force_login(user)
    page = portal.get("/portal/usage/").content.decode()
    assert alloc_id not in page and "No allocation has used energy this month yet." in page


def test_portal_usage_page_shows_kwh_and_co2_that_add_up(small_fleet, client_a, tenant_a, clock):
    now = timezone.now()
    month_start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    t0 = max(month_start, _hour_ago(3))
    alloc_id, (node,) = _active_allocation(client_a, t0)
    agent = _agent(node)
    _beat(agent, clock, t0, wall_j=0)
    end = min(t0 + timedelta(hours=1), now - timedelta(seconds=1))
    _beat(agent, clock, end, wall_j=int(8000 * (end - t0).total_seconds()))
    from django.contrib.auth import get_user_model
    from django.test import Client

    from tenants.models import Membership

    user = get_user_model().objects.create_user("acme-user", password="x")
    Membership.objects.create(user=user, tenant=tenant_a, role="member")
    portal = Client()
    portal.force_login(user)
    page = portal.get("/portal/usage/").content.decode()
    (row,) = _usage(client_a, month_start, now + timedelta(seconds=1))
    assert alloc_id in page
    # the page shows the API's exact figures formatted for people (core.formatting)
    assert f'id="energy-it-total">{format_kwh(row["it_kwh"])}<' in page
    assert f'id="energy-co2-total">{format_number(row["kg_co2e"], 1)}<' in page


@pytest.mark.parametrize(
    "wall",
    [
        {"watts": 8000, "source": "ipmi"},
        {"watts": -1, "source": "bmc"},
        {"watts": 8000, "source": "bmc", "energy_j": -5},
        {"watts": 8000, "source": "bmc", "energy_j": 2**70},
        {"watts": "8000", "source": "bmc"},
        {"source": "bmc"},
        "8000",
    ],
)
def test_bad_wall_power_is_a_400_problem(small_fleet, wall):
    node = Node.objects.order_by("hostname").first()
    body = {"observed_at": "2026-11-02T10:00:00Z", "power_state": "on", "gpus": [], "wall_power": wall}
    response = _agent(node).post("/api/agent/v1/heartbeat", body, format="json")
    assert response.status_code == 400 and response["Content-Type"] == "application/problem+json"
    node.refresh_from_db()
    assert node.wall_power_w is None


def test_bad_gpu_energy_counter_is_a_400_problem(small_fleet):
    node = Node.objects.order_by("hostname").first()
    body = {"observed_at": "2026-11-02T10:00:00Z", "power_state": "on", "gpus": [{"index": 0, "energy_mj": -1}]}
    response = _agent(node).post("/api/agent/v1/heartbeat", body, format="json")
    assert response.status_code == 400
    assert not NodeEnergyCounter.objects.exists()


def test_the_invoice_for_a_month_shows_kwh_and_co2_that_add_up_from_its_allocations(
    small_fleet, client_a, client_b, tenant_a, tenant_b, clock
):
    from django.contrib.auth import get_user_model
    from django.test import Client

    from billing.models import Invoice
    from tenants.models import Membership

    t0 = _hour_ago(5)
    first, (node_1,) = _active_allocation(client_a, t0)
    second, (node_2,) = _active_allocation(client_a, t0 + timedelta(minutes=1))
    AllocationNode.objects.filter(allocation_id=second).update(started_at=t0)
    other, (node_3,) = _active_allocation(client_b, t0)
    for node, kw in ((node_1, 8000), (node_2, 6000), (node_3, 9000)):
        agent = _agent(node)
        _beat(agent, clock, t0 + timedelta(minutes=1), wall_j=0)
        _beat(agent, clock, t0 + timedelta(minutes=61), wall_j=kw * 3600)
    month = (t0 + timedelta(minutes=1)).date().replace(day=1)
    # set-up only: the month's draft invoice as a billing run would leave it (no usage lines needed here)
    invoice = Invoice.objects.using("ledger").create(tenant_id=tenant_a.pk, period=month)
    user = get_user_model().objects.create_user("acme-finance", password="x")
    Membership.objects.create(user=user, tenant=tenant_a, role="member")
    portal = Client()
    portal.force_login(user)
    page = portal.get(f"/portal/invoices/{invoice.pk}/").content.decode()
    start = datetime(month.year, month.month, 1, tzinfo=UTC)
    rows = [r for r in _usage(client_a, start, timezone.now()) if r["month"] == f"{month:%Y-%m}"]
    assert {r["allocation_id"] for r in rows} == {first, second}
    it = sum(Decimal(r["it_kwh"]) for r in rows)
    assert it == Decimal("14.000")  # 8 kWh + 6 kWh; the other tenant's 9 kWh is not here
    assert f'id="invoice-energy-it">{format_kwh(it)}<' in page
    assert f'id="invoice-energy-co2">{format_number(sum(Decimal(r["kg_co2e"]) for r in rows), 1)}<' in page
    assert other not in page
    # another tenant cannot open it
    stranger = get_user_model().objects.create_user("globex-finance", password="x")
    Membership.objects.create(user=stranger, tenant=tenant_b, role="member")
    portal.force_login(stranger)
    assert portal.get(f"/portal/invoices/{invoice.pk}/").status_code == 404


def test_a_membership_inside_one_hour_counts_its_part_once(small_fleet, client_a, clock):
    t0 = _hour_ago(3)
    alloc_id, (node,) = _active_allocation(client_a, t0 + timedelta(minutes=15))
    AllocationNode.objects.filter(allocation_id=alloc_id).update(ended_at=t0 + timedelta(minutes=45))
    agent = _agent(node)
    _beat(agent, clock, t0, wall_j=0)
    _beat(agent, clock, t0 + timedelta(hours=1), wall_j=8000 * 3600)
    (row,) = [r for r in _usage(client_a, t0 - timedelta(days=1), timezone.now()) if r["allocation_id"] == alloc_id]
    assert Decimal(row["it_kwh"]) == Decimal("4.000")  # 30 of the hour's 60 minutes
