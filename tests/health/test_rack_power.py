"""Power history (minute points, hourly downsampling, retention) and the rack power condition,
through the loops' entry points and the incident API."""

from datetime import timedelta

import pytest
from django.utils import timezone

from fleet.models import Node, PowerPoint, Rack
from fleet.services.power_history import record_power_history
from health.models import Incident, RackPowerCondition
from health.services.rack_power import RACK_OVER_MINUTES, run_rack_power_check

pytestmark = pytest.mark.django_db


def _rack_with_nodes():
    return Rack.objects.filter(nodes__isnull=False).distinct().order_by("name").first()


def _draw(rack, watts_per_node, at):
    # the meter readings the agents would have relayed (PDU outlets here)
    Node.objects.filter(rack=rack).update(wall_power_w=watts_per_node, wall_power_source="pdu", wall_power_at=at)


def _minutes(rack, start, minutes, watts):
    for i in range(minutes):
        at = start + timedelta(minutes=i)
        _draw(rack, watts, at)
        record_power_history(now=at)
        run_rack_power_check(now=at)


def test_a_rack_over_its_usable_kw_for_n_minutes_opens_a_condition_and_incident_then_clears(small_fleet, ops_api):
    from tenants.models import Allocation, AllocationNode
    from tenants.services.tenants import create_tenant

    rack = _rack_with_nodes()
    usable = float(rack.usable_kw)  # 23 kW: what the position can power and cool
    tenant = create_tenant(slug="acme", name="Acme", max_nodes=8, actor="test")[0]
    first = Node.objects.filter(rack=rack).order_by("hostname").first()
    # set-up only: a tenant's live allocation on one of the rack's nodes
    allocation = Allocation.objects.create(
        tenant=tenant, name="train", instance_type=first.node_type, node_count=1, state="active"
    )
    AllocationNode.objects.create(allocation=allocation, node=first, started_at=timezone.now())
    start = timezone.now().replace(second=0, microsecond=0) - timedelta(minutes=30)
    # 2 nodes at 12 kW each (set directly: real readings above 10.2 kW are refused) = 24 kW > 23
    _minutes(rack, start, RACK_OVER_MINUTES - 1, 12_000)
    assert not RackPowerCondition.objects.exists()  # not yet N minutes
    _minutes(rack, start + timedelta(minutes=RACK_OVER_MINUTES - 1), 2, 12_000)
    condition = RackPowerCondition.objects.get()
    assert condition.status == "active" and condition.peak_kw == pytest.approx(24.0) and condition.source == "pdu"
    incident = condition.incident
    assert incident.nodes.count() == Node.objects.filter(rack=rack).count()
    body = ops_api.get(f"/api/v1/ops/incidents/{incident.pk}").json()
    text = str(body)
    assert rack.name in text and f"{usable:.2f}" in text
    for node in Node.objects.filter(rack=rack):
        assert node.hostname in text
    assert "Tenants: acme" in text
    # another run changes nothing
    run_rack_power_check(now=start + timedelta(minutes=RACK_OVER_MINUTES + 1))
    assert RackPowerCondition.objects.count() == 1 and Incident.objects.count() == 1
    # the draw falls back: cleared, incident closed
    _minutes(rack, start + timedelta(minutes=RACK_OVER_MINUTES + 2), 1, 9_000)
    condition.refresh_from_db()
    assert condition.status == "cleared" and condition.cleared_at is not None
    assert Incident.objects.get().state == "closed"


def test_a_rack_at_its_rated_draw_within_usable_kw_raises_nothing(small_fleet):
    rack = _rack_with_nodes()
    start = timezone.now().replace(second=0, microsecond=0) - timedelta(minutes=30)
    _minutes(rack, start, RACK_OVER_MINUTES + 2, 10_200)  # 20.4 kW of 23 usable
    assert not RackPowerCondition.objects.exists()


def test_minutes_are_downsampled_hourly_and_pruned_after_30_days(small_fleet):
    rack = _rack_with_nodes()
    hour = timezone.now().replace(minute=0, second=0, microsecond=0) - timedelta(hours=2)
    for i, watts in enumerate((6000, 8000, 10000)):
        at = hour + timedelta(minutes=i)
        _draw(rack, watts, at)
        record_power_history(now=at)
    assert PowerPoint.objects.filter(resolution="1m", rack=rack).count() == 3
    record_power_history(now=hour + timedelta(hours=1, minutes=1))  # the hour is complete
    point = PowerPoint.objects.get(resolution="1h", rack=rack, at=hour)
    assert point.kw == pytest.approx(16.0) and point.kw_max == pytest.approx(20.0) and point.source == "pdu"
    record_power_history(now=hour + timedelta(hours=1, minutes=2))
    assert PowerPoint.objects.filter(resolution="1h", rack=rack, at=hour).count() == 1  # idempotent
    record_power_history(now=hour + timedelta(days=31))
    assert not PowerPoint.objects.filter(resolution="1m", at__lt=hour + timedelta(hours=1)).exists()
    assert PowerPoint.objects.filter(resolution="1h", rack=rack, at=hour).exists()  # hours keep 2 years
    record_power_history(now=hour + timedelta(days=731))
    assert not PowerPoint.objects.filter(resolution="1h", at=hour).exists()


def test_power_history_chart_sums_racks_per_hall_and_says_the_source(small_fleet, operator_client):
    from fleet import charts
    from fleet.selectors import hall_power_history

    rack = _rack_with_nodes()
    at = timezone.now().replace(second=0, microsecond=0) - timedelta(minutes=3)
    _draw(rack, 7000, at)
    record_power_history(now=at)
    points = hall_power_history(since=at - timedelta(minutes=1), resolution="1m")
    (hall,) = [p for p in points if p["hall"] == f"{rack.hall.site.slug}/{rack.hall.name}"]
    others = Node.objects.filter(rack__hall=rack.hall).exclude(rack=rack).count()
    assert hall["kw"] == pytest.approx(14.0 + others * 10.2) and hall["source"] == "mixed"  # pdu + rated racks
    figure = charts.hall_power_history(points, title="t")
    assert list(figure.data[0].customdata) == ["mixed"]
    assert operator_client.get("/fleet/charts/power-24h.json").status_code == 200
