"""seed_fleet builds the fleet the demo and the scale fixture rely on."""

from decimal import Decimal
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db.models import Sum

from fleet.models import GPU, Drive, FabricDomain, Hall, Node, NodeEvent, Rack

pytestmark = pytest.mark.django_db


@pytest.mark.slow  # scale: the demo's 2,048 GPUs
def test_demo_fleet_shape():
    out = StringIO()
    call_command("seed_fleet", "--gpus", "2048", stdout=out)
    assert "Seeded 2048 GPUs in 256 nodes" in out.getvalue()
    assert Node.objects.count() == 256
    assert GPU.objects.count() == 2048
    assert Drive.objects.count() == 256 * 10
    assert FabricDomain.objects.count() == 1
    assert set(Node.objects.values_list("node_type__slug", flat=True)) == {"h100-sxm-8x"}
    assert set(Node.objects.values_list("lifecycle", flat=True)) == {"available"}
    assert NodeEvent.objects.filter(action="seed").count() == 256
    air = Rack.objects.filter(cooling="air")
    assert air.count() == 128
    per_rack = (
        Rack.objects.filter(cooling="air").annotate(kw=Sum("nodes__node_type__node_kw")).values_list("kw", flat=True)
    )
    assert set(per_rack) == {Decimal("20.40")}
    liquid_hall = Hall.objects.get(racks__cooling="liquid", racks__name__endswith="r0001")
    assert liquid_hall.racks.count() == 16 and not Node.objects.filter(rack__hall=liquid_hall).exists()
    for node in Node.objects.select_related("rack__hall__site", "node_type", "fabric_domain")[:20]:
        node.full_clean()  # every seeded placement obeys the inventory rules


def test_bad_arguments_and_repeats_are_refused_clearly():
    with pytest.raises(CommandError, match="multiple of 8"):
        call_command("seed_fleet", "--gpus", "10", stdout=StringIO())
    call_command("seed_fleet", "--gpus", "64", stdout=StringIO())
    with pytest.raises(CommandError, match="already exists"):
        call_command("seed_fleet", "--gpus", "64", stdout=StringIO())
    out = StringIO()
    call_command("seed_fleet", "--gpus", "64", "--if-empty", stdout=out)
    assert "nothing to seed" in out.getvalue()
