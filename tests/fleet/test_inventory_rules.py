"""Cross-object inventory rules enforced by clean(): power, cooling, U space and site."""

from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError

from fleet.choices import Cooling
from fleet.models import FabricDomain, Hall, Node, NodeType, Rack, Site

pytestmark = pytest.mark.django_db


def _rack(hall, name, *, kw, cooling=Cooling.AIR):
    return Rack.objects.create(
        hall=hall,
        name=name,
        row=0,
        column=Rack.objects.filter(hall=hall).count(),
        rated_power_kw=Decimal(kw),
        cooling=cooling,
        cooling_capacity_kw=Decimal(kw),
    )


@pytest.fixture
def hall():
    site = Site.objects.create(slug="s1", name="S1")
    return Hall.objects.create(site=site, name="h1", it_power_budget_kw=Decimal("1000"))


def test_nvl72_into_a_20kw_air_position_is_refused_with_the_reason(hall):
    rack = _rack(hall, "air-1", kw="20.4")
    node = Node(
        hostname="nvl-1", serial="X1", rack=rack, u_position=1, node_type=NodeType.objects.get(slug="gb200-nvl72")
    )
    with pytest.raises(ValidationError) as err:
        node.full_clean()
    text = " ".join(err.value.messages)
    assert "needs liquid cooling" in text and "air-cooled" in text
    assert "132.00 kW" in text and "20.4 kW" in text


def test_nvl72_fits_a_liquid_140kw_position(hall):
    rack = _rack(hall, "liq-1", kw="140", cooling=Cooling.LIQUID)
    node = Node(
        hostname="nvl-1", serial="X1", rack=rack, u_position=1, node_type=NodeType.objects.get(slug="gb200-nvl72")
    )
    node.full_clean()


def test_a_third_h100_overloads_a_two_node_air_rack(hall):
    h100 = NodeType.objects.get(slug="h100-sxm-8x")
    rack = _rack(hall, "air-1", kw="23")
    Node.objects.create(hostname="a", serial="1", rack=rack, u_position=1, node_type=h100)
    Node.objects.create(hostname="b", serial="2", rack=rack, u_position=11, node_type=h100)
    third = Node(hostname="c", serial="3", rack=rack, u_position=21, node_type=h100)
    with pytest.raises(ValidationError, match="already carries 20.40 kW"):
        third.full_clean()


def test_overlapping_u_positions_are_refused(hall):
    h100 = NodeType.objects.get(slug="h100-sxm-8x")
    rack = _rack(hall, "air-1", kw="40")
    Node.objects.create(hostname="a", serial="1", rack=rack, u_position=1, node_type=h100)
    with pytest.raises(ValidationError, match="overlaps a"):
        Node(hostname="b", serial="2", rack=rack, u_position=5, node_type=h100).full_clean()
    with pytest.raises(ValidationError, match="does not fit"):
        Node(hostname="c", serial="3", rack=rack, u_position=40, node_type=h100).full_clean()


def test_node_and_fabric_must_share_a_site(hall):
    other_site = Site.objects.create(slug="s2", name="S2")
    fabric = FabricDomain.objects.create(site=other_site, name="pod", technology="ib-ndr", generation="hopper")
    rack = _rack(hall, "air-1", kw="40")
    node = Node(
        hostname="a",
        serial="1",
        rack=rack,
        u_position=1,
        node_type=NodeType.objects.get(slug="h100-sxm-8x"),
        fabric_domain=fabric,
    )
    with pytest.raises(ValidationError, match="must be in one site"):
        node.full_clean()


def test_catalogue_is_preloaded_from_reference_with_sources():
    h100 = NodeType.objects.get(slug="h100-sxm-8x")
    assert h100.node_kw == Decimal("10.20") and h100.gpus_per_node == 8 and h100.cooling_requirement == "air"
    assert "DGX H100" in h100.source
    nvl = NodeType.objects.get(slug="gb200-nvl72")
    assert nvl.rack_kw == Decimal("132") and nvl.cooling_requirement == "liquid"
    assert set(NodeType.objects.values_list("slug", flat=True)) >= {
        "a100-sxm-8x",
        "h100-sxm-8x",
        "h200-sxm-8x",
        "b200-sxm-8x",
        "gb200-nvl72",
        "b300-sxm-8x",
        "gb300-nvl72",
    }
