"""The month roll-up behind the usage reads: a month an allocation held a node whole is read from
one row per node, and it agrees with the hourly rows it sums (through the heartbeat endpoint)."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from fleet.models import NodeEnergyHour, NodeEnergyMonth, Site
from health.api import agent_views
from tenants.energy import allocation_energy
from tenants.models import AllocationNode

from .test_energy import Clock, _active_allocation, _agent, _beat, _usage

pytestmark = pytest.mark.django_db


@pytest.fixture
def clock(monkeypatch):
    clock = Clock(timezone.now())
    monkeypatch.setattr(agent_views, "timezone", clock)  # the heartbeat view reads the time from here
    return clock


def _month_two_back():
    this_month = timezone.now().replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    start = (this_month - timedelta(days=40)).replace(day=1)
    return start, (start + timedelta(days=32)).replace(day=1)


def _eight_kw_across(client, clock, start, end):
    """An allocation holding one node from a day before `start`, its agent silent from 30 min
    before `start` to 30 min after `end` while the BMC counter counted 8 kW."""
    alloc_id, (node,) = _active_allocation(client, start - timedelta(days=1))
    agent = _agent(node)
    first, last = start - timedelta(minutes=30), end + timedelta(minutes=30)
    _beat(agent, clock, first, wall_j=0)
    _beat(agent, clock, last, wall_j=int(8000 * (last - first).total_seconds()))
    return alloc_id, node


def test_a_whole_month_reads_the_roll_up_and_agrees_with_the_hours(
    small_fleet, client_a, tenant_a, clock, django_assert_num_queries
):
    start, end = _month_two_back()
    alloc_id, node = _eight_kw_across(client_a, clock, start, end)
    hours = (end - start) / timedelta(hours=1)

    month = NodeEnergyMonth.objects.get(node=node, month=start.date())
    in_hours = sum(
        NodeEnergyHour.objects.filter(node=node, hour__gte=start, hour__lt=end).values_list("it_energy_j", flat=True)
    )
    assert month.it_energy_j == in_hours == 8000 * 3600 * hours
    # the roll-up of every month touched equals its hours: nothing lost at the month edges
    assert sum(NodeEnergyMonth.objects.filter(node=node).values_list("it_energy_j", flat=True)) == sum(
        NodeEnergyHour.objects.filter(node=node).values_list("it_energy_j", flat=True)
    )

    # memberships, the month roll-up, the profile check: no hourly read for a whole month
    with django_assert_num_queries(3):
        (row,) = allocation_energy(tenant_id=tenant_a.pk, start=start, end=end)
    assert row.it_kwh == Decimal(8 * hours).quantize(Decimal("0.001"))
    assert row.facility_kwh == (8 * Decimal(hours) * Site.objects.get().pue).quantize(Decimal("0.001"))
    assert row.coverage_pct == Decimal("100.0") and row.carbon_source == "constant"

    # the same month through the API, and a window starting two hours in (hourly rows) agree
    (api_row,) = [r for r in _usage(client_a, start, end) if r["allocation_id"] == alloc_id]
    assert Decimal(api_row["it_kwh"]) == row.it_kwh
    (part,) = [r for r in _usage(client_a, start + timedelta(hours=2), end) if r["allocation_id"] == alloc_id]
    assert Decimal(part["it_kwh"]) == row.it_kwh - 16


def test_a_month_the_node_joined_inside_reads_hours_for_that_month_only(small_fleet, client_a, tenant_a, clock):
    start, end = _month_two_back()
    alloc_id, node = _eight_kw_across(client_a, clock, start, end)
    # the membership began 10 h 30 min into the month: that month is partial, prorated at its edge hour
    AllocationNode.objects.filter(allocation_id=alloc_id).update(started_at=start + timedelta(hours=10, minutes=30))
    (row,) = allocation_energy(tenant_id=tenant_a.pk, start=start, end=end)
    hours = (end - start) / timedelta(hours=1) - 10.5
    assert row.it_kwh == Decimal(8 * hours).quantize(Decimal("0.001"))


def test_facility_kwh_and_the_power_page_use_the_sites_pue_not_the_halls(small_fleet, client_a, tenant_a, clock):
    from django.contrib.auth import get_user_model
    from django.test import Client

    from fleet.models import Hall

    start, end = _month_two_back()
    alloc_id, node = _eight_kw_across(client_a, clock, start, end)
    Site.objects.update(pue=Decimal("1.20"))
    Hall.objects.update(pue=Decimal("2.00"))  # the planner's design figure: not what energy is billed at
    (row,) = [r for r in _usage(client_a, start, end) if r["allocation_id"] == alloc_id]
    assert Decimal(row["facility_kwh"]) == (Decimal(row["it_kwh"]) * Decimal("1.20")).quantize(Decimal("0.001"))
    operator = get_user_model().objects.create_superuser("pue-op", password="x")
    page = Client()
    page.force_login(operator)
    html = page.get("/fleet/power/").content.decode()
    assert '<td class="num">1.2</td>' in html and '<td class="num">2.0</td>' not in html
