"""Identifiers frozen in use and load checked wherever it is added (issue 42, docs/admin.md "Edits
that respect the domain"): a node type's slug (the billing SKU) and sizing do not change while
nodes, allocations or price-book entries use it; a power feed is not cut below, nor removed from
under, the load of its rack; the hall budget and the rack's feeds hold every node added, by the
admin form and by the import alike."""

from decimal import Decimal

import pytest
from django.urls import reverse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from billing.models import PriceBookEntry
from fleet.inventory_files import Sheet, Workbook
from fleet.models import Hall, Node, NodeType, PowerFeed, Rack
from fleet.services.inventory_import import plan_import
from tenants.models import Allocation
from tenants.services.tenants import create_tenant

from .admin_helpers import change_form_data, node_add_data

pytestmark = pytest.mark.django_db
NODE_HEADER = ["hostname", "serial", "rack", "u_position", "node_type"]


def _change(client, obj, **overrides):
    url = reverse(f"admin:fleet_{obj._meta.model_name}_change", args=[obj.pk])
    page = client.get(url)
    assert page.status_code == 200
    return client.post(url, change_form_data(page, **overrides))


def _errors(response) -> str:
    assert response.status_code == 200, response.status_code
    errors = [str(e) for errs in response.context["adminform"].form.errors.values() for e in errs]
    for inline in response.context["inline_admin_formsets"]:
        errors += [str(e) for e in inline.formset.non_form_errors()]
        errors += [str(e) for form_errors in inline.formset.errors for errs in form_errors.values() for e in errs]
    return " ".join(errors)


def _copy_type(slug: str, new_slug: str) -> NodeType:
    node_type = NodeType.objects.get(slug=slug)
    node_type.pk, node_type.slug = None, new_slug
    node_type.save()
    return node_type


# ---- the node type's identity ------------------------------------------------------------------


@pytest.mark.parametrize(
    "field, value",
    [("slug", "h100-renamed"), ("gpu_model", "H100-PCIe"), ("nvlink_domain_gpus", "4"), ("fabric", "roce-400g")],
)
def test_a_slug_or_sizing_in_use_cannot_change(operator_client, small_fleet, field, value):
    node_type = NodeType.objects.get(slug="h100-sxm-8x")
    errors = _errors(_change(operator_client, node_type, **{field: value}))
    nodes = Node.objects.filter(node_type=node_type).count()
    assert f"{nodes} node(s)" in errors and "price-book entries" in errors and "Create a new node type" in errors
    assert NodeType.objects.get(pk=node_type.pk).slug == "h100-sxm-8x"


def test_descriptive_fields_of_a_type_in_use_may_still_be_corrected(operator_client, small_fleet):
    node_type = NodeType.objects.get(slug="h100-sxm-8x")
    assert _change(operator_client, node_type, vendor_model="NVIDIA DGX H100 (corrected)").status_code == 302


@pytest.mark.parametrize("user", ["allocation", "price-book entry", "nobody"])
def test_each_kind_of_user_alone_freezes_the_slug(operator_client, small_fleet, user):
    node_type = _copy_type("b200-sxm-8x", "b200-lab")
    if user == "allocation":
        tenant, _ = create_tenant(slug="acme", name="Acme", max_nodes=8, actor="test")
        Allocation.objects.create(tenant=tenant, name="job", instance_type=node_type, node_count=1)
    elif user == "price-book entry":
        entry = PriceBookEntry.objects.filter(sku="b200-sxm-8x").first()
        entry.pk, entry.sku, entry.version = None, "b200-lab", 999
        entry.save()
    response = _change(operator_client, node_type, slug="b200-lab-2")
    if user == "nobody":
        assert response.status_code == 302 and NodeType.objects.filter(slug="b200-lab-2").exists()
        return
    assert "use type b200-lab" in _errors(response)
    assert NodeType.objects.get(pk=node_type.pk).slug == "b200-lab"


def test_a_priced_type_without_nodes_is_not_deleted(operator_client, small_fleet):
    node_type = NodeType.objects.get(slug="a100-sxm-8x")
    assert not Node.objects.filter(node_type=node_type).exists()
    response = operator_client.post(reverse("admin:fleet_nodetype_delete", args=[node_type.pk]), {"post": "yes"})
    assert response.status_code == 403
    assert NodeType.objects.filter(pk=node_type.pk).exists()


# ---- power feeds ----------------------------------------------------------------------------------


def _loaded_rack() -> Rack:
    return Rack.objects.filter(cooling="air", nodes__isnull=False).order_by("name").first()


def _feed_form(page, **by_name) -> dict:
    """The rack page's POST with feed rows changed: {"B": {"amperage": "1"}} or {"B": "DELETE"}."""
    data = change_form_data(page)
    formset = next(i.formset for i in page.context["inline_admin_formsets"] if i.opts.model is PowerFeed)
    for form in formset.forms:
        change = by_name.get(form.instance.name)
        if change == "DELETE":
            data[form.add_prefix("DELETE")] = "on"
        elif change:
            data.update({form.add_prefix(k): v for k, v in change.items()})
    return data


def test_a_feed_cannot_be_cut_below_its_racks_load(operator_client, small_fleet):
    rack = _loaded_rack()
    url = reverse("admin:fleet_rack_change", args=[rack.pk])
    page = operator_client.get(url)
    errors = _errors(operator_client.post(url, _feed_form(page, B={"amperage": "1"})))
    assert "draw 20.40 kW" in errors and "carry the rack alone" in errors
    assert PowerFeed.objects.get(rack=rack, name="B").amperage == 40
    # an empty rack's feed may be set to anything
    empty = Rack.objects.filter(cooling="air", nodes__isnull=True).order_by("name").first()
    if empty is not None and empty.power_feeds.exists():
        page = operator_client.get(reverse("admin:fleet_rack_change", args=[empty.pk]))
        response = operator_client.post(page.request["PATH_INFO"], _feed_form(page, B={"amperage": "1"}))
        assert response.status_code == 302


def test_a_loaded_rack_keeps_a_redundant_pair_of_feeds(operator_client, small_fleet):
    rack = _loaded_rack()
    url = reverse("admin:fleet_rack_change", args=[rack.pk])
    page = operator_client.get(url)
    errors = _errors(operator_client.post(url, _feed_form(page, B="DELETE")))
    assert "keeps a redundant pair" in errors
    assert rack.power_feeds.count() == 2
    PowerFeed.objects.create(rack=rack, name="C", voltage=415, amperage=40)  # the replacement first
    page = operator_client.get(url)
    assert operator_client.post(url, _feed_form(page, B="DELETE")).status_code == 302
    assert sorted(rack.power_feeds.values_list("name", flat=True)) == ["A", "C"]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(amps=st.integers(1, 63), three_phase=st.booleans(), derate=st.integers(50, 100))
def test_a_feed_change_is_accepted_exactly_when_it_carries_the_rack(small_fleet, amps, three_phase, derate):
    from django.core.exceptions import ValidationError

    rack = _loaded_rack()
    feed = PowerFeed.objects.get(rack=rack, name="B")
    feed.amperage, feed.three_phase, feed.max_utilization_pct = amps, three_phase, derate
    carries = Decimal(415 * amps) * (Decimal("1.732") if three_phase else 1) * derate / 100 / 1000
    refused = False
    try:
        feed.full_clean()
    except ValidationError:
        refused = True
    assert refused == (carries.quantize(Decimal("0.01")) < Decimal("20.40") and feed.available_kw < Decimal("23.00"))


# ---- load added: the hall budget and the rack's feeds hold every new node --------------------------


def _liquid_racks():
    return list(Rack.objects.filter(cooling="liquid", hall__name="hall-2").order_by("row", "column"))


def _add_node(client, rack, hostname, u=1, slug="b200-sxm-8x"):
    node_type = NodeType.objects.get(slug=slug)
    return client.post(
        reverse("admin:fleet_node_add"), node_add_data(hostname=hostname, rack=rack, node_type=node_type, u_position=u)
    )


def test_the_hall_budget_holds_a_node_added_in_the_admin(operator_client, small_fleet):
    Hall.objects.filter(name="hall-2").update(it_power_budget_kw=Decimal("20"))
    racks = _liquid_racks()
    first = _add_node(operator_client, racks[0], "b200-a")
    assert first.status_code == 302, _errors(first)  # 14.3 of 20 kW
    response = _add_node(operator_client, racks[1], "b200-b")
    html = response.content.decode()
    assert response.status_code == 200 and "IT power budget of 20.00 kW" in html and "8.60" in html
    assert not Node.objects.filter(hostname="b200-b").exists()
    # and the hall can still be saved afterwards: its budget holds what is placed
    hall = Hall.objects.get(name="hall-2")
    assert _change(operator_client, hall, pue="1.25").status_code == 302


def test_the_racks_feeds_hold_a_node_added_in_the_admin(operator_client, small_fleet):
    rack = Rack.objects.filter(cooling="air", nodes__isnull=True).order_by("name").first() or _loaded_rack()
    PowerFeed.objects.filter(rack=rack).delete()
    PowerFeed.objects.create(rack=rack, name="A", voltage=415, amperage=16)  # 9.2 kW: less than an H100 node
    PowerFeed.objects.create(rack=rack, name="B", voltage=415, amperage=40)
    Node.objects.filter(rack=rack).delete()
    response = _add_node(operator_client, rack, "h100-x", u=1, slug="h100-sxm-8x")
    assert response.status_code == 200 and "weakest carries 9.20 kW" in response.content.decode()


def test_an_edit_that_adds_no_load_is_not_blocked_by_an_overloaded_hall(operator_client, small_fleet):
    node = Node.objects.filter(lifecycle="available").order_by("hostname").first()
    Hall.objects.filter(pk=node.rack.hall_id).update(it_power_budget_kw=Decimal("1"))  # legacy overload
    assert _change(operator_client, node, leaf_switch="leaf-7").status_code == 302


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(budget=st.integers(0, 60), count=st.integers(1, 4))
def test_the_import_holds_the_hall_budget_row_by_row(small_fleet, budget, count):
    """Rows 1 and 2 and beyond: the k-th new B200 fits exactly when k × 14.3 kW is within the
    budget (the hall is empty), and the import says so on that row."""
    Hall.objects.filter(name="hall-2").update(it_power_budget_kw=Decimal(budget))
    racks = _liquid_racks()
    rows = [(2 + i, [f"imp-{i}", f"SN-IMP-{i}", racks[i].name, 1, "b200-sxm-8x"]) for i in range(count)]
    plan = plan_import(Workbook({"nodes": Sheet("nodes", NODE_HEADER, rows)}, []))
    fits = int(Decimal(budget) / Decimal("14.3"))
    assert len(plan.new_nodes) == min(count, fits)
    assert sorted(e.row for e in plan.errors) == [2 + i for i in range(fits, count)]
    assert all("IT power budget" in e.message for e in plan.errors)


def test_a_rack_moved_with_its_nodes_is_checked_against_the_other_halls_budget(operator_client, small_fleet):
    rack = _loaded_rack()
    Hall.objects.filter(name="hall-2").update(it_power_budget_kw=Decimal("10"))
    liquid = Hall.objects.get(name="hall-2")
    errors = _errors(_change(operator_client, rack, hall=str(liquid.pk), row="40", column="40"))
    assert "budget of 10.00 kW" in errors
    assert Rack.objects.get(pk=rack.pk).hall_id != liquid.pk
