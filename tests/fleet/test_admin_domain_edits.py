"""Admin edits that respect the domain: state-machine fields read-only, an allocated node's
placement locked, racks, node types and halls re-checked against what they hold, evidence
never deleted, validation of hostnames, BMC addresses and GPUs, one audit trail, and the
navigation between racks, nodes and allocations."""

from decimal import Decimal

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from core.models import AuditEvent
from fleet.models import GPU, Drive, Hall, Node, NodeBMC, NodeEvent, NodeType, Rack, Site
from tenants.models import Allocation, AllocationNode
from tenants.services.tenants import create_tenant

from .admin_helpers import change_form_data, client_for, staff_with

pytestmark = pytest.mark.django_db


def _change(client, obj, **overrides):
    url = reverse(f"admin:fleet_{obj._meta.model_name}_change", args=[obj.pk])
    page = client.get(url)
    assert page.status_code == 200
    return client.post(url, change_form_data(page, **overrides))


def _allocate(node):
    tenant = create_tenant(slug=f"t-{node.hostname}", name="T", max_nodes=8, actor="test")[0]
    allocation = Allocation.objects.create(tenant=tenant, name="job", instance_type=node.node_type, node_count=1)
    AllocationNode.objects.create(allocation=allocation, node=node, started_at=timezone.now())
    Node.objects.filter(pk=node.pk).update(lifecycle="active")
    node.refresh_from_db()
    return allocation


def _errors(response) -> str:
    assert response.status_code == 200, response.status_code
    form = response.context["adminform"].form
    return " ".join(str(e) for errs in form.errors.values() for e in errs)


@pytest.fixture
def available_node(small_fleet):
    return Node.objects.filter(lifecycle="available").order_by("hostname").first()


def test_state_machine_fields_are_not_editable_in_the_change_form(operator_client, available_node):
    response = _change(
        operator_client,
        available_node,
        cordoned="on",
        cordon_reason="sneaky",
        attribution="tenant",
        lifecycle="retired",
        leaf_switch="leaf-9",
    )
    assert response.status_code == 302
    available_node.refresh_from_db()
    assert (available_node.cordoned, available_node.cordon_reason, available_node.attribution) == (False, "", "")
    assert available_node.lifecycle == "available" and available_node.leaf_switch == "leaf-9"
    # the legitimate edit is audited with its diff and leaves a node event
    audit = AuditEvent.objects.get(action="node.admin_update", object_id=str(available_node.pk))
    assert audit.after == {"leaf_switch": "leaf-9"} and audit.actor == "user:op"
    assert NodeEvent.objects.filter(node=available_node, action="inventory_update").exists()


def test_an_allocated_nodes_rack_type_and_fabric_are_locked(operator_client, available_node):
    _allocate(available_node)
    other_rack = Rack.objects.exclude(pk=available_node.rack_id).filter(cooling="air").first()
    page = operator_client.get(reverse("admin:fleet_node_change", args=[available_node.pk]))
    assert "rack" not in page.context["adminform"].form.fields
    assert "node_type" not in page.context["adminform"].form.fields
    _change(
        operator_client,
        available_node,
        rack=str(other_rack.pk),
        u_position="30",
        node_type=str(NodeType.objects.get(slug="h200-sxm-8x").pk),
    )
    available_node.refresh_from_db()
    assert available_node.rack_id != other_rack.pk and available_node.node_type.slug == "h100-sxm-8x"
    # and the model refuses it whatever the form does
    available_node.rack = other_rack
    with pytest.raises(Exception, match="carries a tenant allocation"):
        available_node.full_clean()


def test_the_node_page_links_its_allocation_and_the_list_shows_serial_and_rack(operator_client, available_node):
    allocation = _allocate(available_node)
    page = operator_client.get(reverse("admin:fleet_node_change", args=[available_node.pk])).content.decode()
    assert reverse("admin:tenants_allocation_change", args=[allocation.pk]) in page
    listing = operator_client.get(reverse("admin:fleet_node_changelist")).content.decode()
    assert available_node.serial in listing
    assert reverse("admin:fleet_rack_change", args=[available_node.rack_id]) in listing


def test_rack_page_lists_its_nodes_top_first_and_filters_work(operator_client, small_fleet):
    rack = Rack.objects.filter(nodes__isnull=False).order_by("name").first()
    page = operator_client.get(reverse("admin:fleet_rack_change", args=[rack.pk])).content.decode()
    hostnames = list(rack.nodes.order_by("-u_position").values_list("hostname", flat=True))
    positions = [page.index(h) for h in hostnames]
    assert positions == sorted(positions) and len(hostnames) == 2
    by_rack = operator_client.get(reverse("admin:fleet_node_changelist"), {"rack": str(rack.pk)})
    assert {n.hostname for n in by_rack.context["cl"].result_list} == set(hostnames)
    by_row = operator_client.get(reverse("admin:fleet_node_changelist"), {"rack_row": "dc1/hall-1/0"})
    assert len(by_row.context["cl"].result_list) == 8
    hall = rack.hall
    assert rack.name in operator_client.get(reverse("admin:fleet_hall_change", args=[hall.pk])).content.decode()
    # bad filter values: the admin's own "invalid filter" answer, never a 500
    for params in ({"rack": "nope"}, {"rack_row": "x"}, {"rack__hall__id__exact": "zz"}):
        assert operator_client.get(reverse("admin:fleet_node_changelist"), params).status_code in (200, 302, 400)


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("u_height", "0", "at least 1U"),
        ("u_height", "10", "cannot hold it"),
        ("cooling", "liquid", "needs air cooling"),
        ("rated_power_kw", "5", "Move nodes out first"),
    ],
)
def test_rack_edits_are_re_checked_against_the_nodes_in_it(operator_client, small_fleet, field, value, message):
    rack = Rack.objects.filter(nodes__isnull=False).order_by("name").first()
    before = Rack.objects.filter(pk=rack.pk).values().get()
    assert message in _errors(_change(operator_client, rack, **{field: value}))
    assert Rack.objects.filter(pk=rack.pk).values().get() == before


@pytest.mark.parametrize(
    "field, value",
    [
        ("gpus_per_node", "4"),
        ("node_kw", "50"),
        ("cooling_requirement", "liquid"),
        ("generation", "blackwell"),
    ],
)
def test_a_node_type_in_use_keeps_what_nodes_were_sized_by(operator_client, small_fleet, field, value):
    node_type = NodeType.objects.get(slug="h100-sxm-8x")
    errors = _errors(_change(operator_client, node_type, **{field: value}))
    assert "Create a new node type" in errors and "8 node(s)" in errors
    node_type.refresh_from_db()
    assert (node_type.gpus_per_node, node_type.node_kw) == (8, Decimal("10.20"))


def test_an_unused_node_type_may_still_change(operator_client, small_fleet):
    template = NodeType.objects.get(slug="a100-sxm-8x")  # no nodes, but priced: in use by price-book entries
    errors = _errors(_change(operator_client, template, node_kw="6.6"))
    assert "price-book entries use type a100-sxm-8x" in errors
    template.pk, template.slug = None, "a100-sxm-8x-lab"  # a copy nobody uses yet
    template.save()
    assert _change(operator_client, template, node_kw="6.6", slug="a100-lab").status_code == 302


def test_a_hall_budget_below_its_load_is_refused_naming_the_overload(operator_client, small_fleet):
    hall = Hall.objects.get(name="hall-1")
    errors = _errors(_change(operator_client, hall, it_power_budget_kw="1"))
    assert "81.60 kW" in errors and "overload the hall by 80.60 kW" in errors
    assert Hall.objects.get(pk=hall.pk).it_power_budget_kw != Decimal(1)


def test_nodes_are_never_hard_deleted(operator_client, available_node):
    response = operator_client.post(reverse("admin:fleet_node_delete", args=[available_node.pk]), {"post": "yes"})
    assert response.status_code == 403
    bulk = operator_client.post(
        reverse("admin:fleet_node_changelist"),
        {"action": "delete_selected", "_selected_action": [available_node.pk], "post": "yes"},
    )
    assert bulk.status_code == 403  # an action the user may not run is refused, and audited
    assert Node.objects.filter(pk=available_node.pk).exists()
    assert (
        GPU.objects.filter(node=available_node).count() == 8 and NodeEvent.objects.filter(node=available_node).exists()
    )


def test_gpus_and_drives_of_an_allocated_node_are_not_deleted(operator_client, available_node):
    _allocate(available_node)
    gpu, drive = GPU.objects.filter(node=available_node).first(), Drive.objects.filter(node=available_node).first()
    assert operator_client.post(reverse("admin:fleet_gpu_delete", args=[gpu.pk]), {"post": "yes"}).status_code == 403
    assert (
        operator_client.post(reverse("admin:fleet_drive_delete", args=[drive.pk]), {"post": "yes"}).status_code == 403
    )
    operator_client.post(
        reverse("admin:fleet_gpu_changelist"),
        {"action": "delete_selected", "_selected_action": [gpu.pk], "post": "yes"},
    )
    assert GPU.objects.filter(node=available_node).count() == 8
    page = operator_client.get(reverse("admin:fleet_node_change", args=[available_node.pk]))
    assert not any(f.formset.can_delete for f in page.context["inline_admin_formsets"])


def test_drives_of_a_node_that_was_in_service_are_evidence(operator_client, available_node):
    drive = Drive.objects.filter(node=available_node).first()
    assert (
        operator_client.post(reverse("admin:fleet_drive_delete", args=[drive.pk]), {"post": "yes"}).status_code == 403
    )
    assert Drive.objects.filter(pk=drive.pk).exists()


def test_a_drive_typed_in_at_enrolment_may_be_removed_and_that_is_audited(operator_client, available_node):
    Node.objects.filter(pk=available_node.pk).update(lifecycle="enrolled")
    drive = Drive.objects.filter(node=available_node).first()
    assert (
        operator_client.post(reverse("admin:fleet_drive_delete", args=[drive.pk]), {"post": "yes"}).status_code == 302
    )
    assert AuditEvent.objects.filter(action="drive.admin_delete", object_id=str(drive.pk)).exists()


NODE_ADD = {
    "gpus-TOTAL_FORMS": 0,
    "gpus-INITIAL_FORMS": 0,
    "drives-TOTAL_FORMS": 0,
    "drives-INITIAL_FORMS": 0,
    "events-TOTAL_FORMS": 0,
    "events-INITIAL_FORMS": 0,
}


def _add_node(client, **fields):
    rack = Rack.objects.filter(cooling="liquid").order_by("name").first()
    data = {
        "hostname": "new-node",
        "serial": "SN-NEW",
        "node_type": NodeType.objects.get(slug="b200-sxm-8x").pk,
        "rack": rack.pk,
        "u_position": 1,
        "leaf_switch": "",
        **NODE_ADD,
    }
    data.update(fields)
    return client.post(reverse("admin:fleet_node_add"), data)


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("hostname", "gpu 01 ; rm -rf /", "RFC 1123"),
        ("hostname", "-bad-", "RFC 1123"),
    ],
)
def test_node_fields_are_validated_with_a_message(operator_client, small_fleet, field, value, message):
    response = _add_node(operator_client, **{field: value})
    assert message in _errors(response)
    assert not Node.objects.filter(serial="SN-NEW").exists()


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("address", "3c:ec:ef:12:34:56", "put it in the BMC MAC field"),
        ("address", "fe80::1%eth0", "zone-scoped"),
        ("address", "999.1.1.1", "neither an IP address nor a DNS name"),
        ("address", "169.254.169.254", "link-local"),
        ("address", "172.16.0.9", "outside the networks"),
        ("mac", "zz:zz", "not a MAC address"),
        ("redfish_url", "http://127.0.0.1:5432", "loopback"),
        ("redfish_url", "http://10.1.2.3", "Plain HTTP"),
    ],
)
def test_bmc_fields_are_validated_with_a_message(operator_client, small_fleet, field, value, message):
    node = Node.objects.filter(bmc__isnull=True).first() or Node.objects.first()
    NodeBMC.objects.filter(node=node).delete()
    data = {"node": node.pk, "address": "", "mac": "", "redfish_url": "", "system_path": "", field: value}
    response = operator_client.post(reverse("admin:fleet_nodebmc_add"), data)
    assert message in _errors(response)
    assert not NodeBMC.objects.filter(node=node).exists()


def test_a_node_added_in_the_admin_is_enrolled_evented_and_audited(operator_client, small_fleet):
    response = _add_node(
        operator_client,
        **{"gpus-TOTAL_FORMS": 1, "gpus-0-index": 0, "gpus-0-uuid": "GPU-2f9d3b1e-7c4a-4e0b-9a51-0c7e4d2b8f11"},
    )
    assert response.status_code == 302, _errors(response)
    node = Node.objects.get(hostname="new-node")
    assert node.lifecycle == "enrolled"
    bmc = operator_client.post(
        reverse("admin:fleet_nodebmc_add"),
        {"node": node.pk, "address": "bmc-new.dc1", "mac": "3C-EC-EF-12-34-56", "redfish_url": "", "system_path": ""},
    )
    assert bmc.status_code == 302, _errors(bmc)
    assert NodeBMC.objects.get(node=node).mac == "3c:ec:ef:12:34:56"
    assert NodeEvent.objects.filter(node=node, action="enrol").count() == 1
    assert AuditEvent.objects.filter(action="node.admin_create", object_id=str(node.pk)).exists()
    assert AuditEvent.objects.filter(action="gpu.admin_create").count() == 1


def test_gpus_are_bounded_by_the_node_type_and_need_an_nvidia_uuid(operator_client, small_fleet):
    node = Node.objects.order_by("hostname").first()
    response = operator_client.post(
        reverse("admin:fleet_gpu_add"),
        {"node": node.pk, "index": 8, "uuid": "GPU-2f9d3b1e-7c4a-4e0b-9a51-0c7e4d2b8f11"},
    )
    assert "8 GPUs (indexes 0-7)" in _errors(response)
    response = operator_client.post(reverse("admin:fleet_gpu_add"), {"node": node.pk, "index": 1, "uuid": "free text"})
    assert "NVIDIA GPU UUID" in _errors(response)
    assert GPU.objects.filter(node=node).count() == 8


def test_admin_deletes_and_adds_of_plain_rows_are_audited(operator_client, small_fleet):
    site = Site.objects.create(slug="spare", name="Spare campus")
    response = operator_client.post(reverse("admin:fleet_site_delete", args=[site.pk]), {"post": "yes"})
    assert response.status_code == 302
    assert AuditEvent.objects.filter(action="site.admin_delete", object_id=str(site.pk), actor="user:op").exists()


def test_bad_autocomplete_requests_are_4xx(operator_client, small_fleet):
    url = reverse("admin:autocomplete")
    ok = operator_client.get(url, {"app_label": "fleet", "model_name": "node", "field_name": "rack", "term": "hall"})
    assert ok.status_code == 200
    for params in ({"app_label": "fleet", "model_name": "node", "field_name": "nope"}, {"app_label": "x"}, {}):
        assert operator_client.get(url, params).status_code in (403, 404)


def test_a_staff_user_with_only_view_permission_cannot_edit_a_node(small_fleet, django_user_model):
    viewer = client_for(Client, staff_with(django_user_model, "viewer", "fleet.view_node"))
    node = Node.objects.order_by("hostname").first()
    assert viewer.post(reverse("admin:fleet_node_change", args=[node.pk]), {"hostname": "renamed"}).status_code == 403
    node.refresh_from_db()
    assert node.hostname != "renamed"
