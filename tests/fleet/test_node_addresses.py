"""Node network identities (issue 46): a management and a data-plane address per node, unique
fleet-wide and validated, from the admin import (and the seed); operators see both, tenants the
data-plane one."""

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.test import Client
from django.urls import reverse

from fleet.models import Node, Rack
from fleet.validators import validate_node_address

from .admin_helpers import NODE_HEADER, client_for, csv_upload, staff_with, staged_id

pytestmark = pytest.mark.django_db
IMPORT = "admin:fleet_node_import"
HEADER = [*NODE_HEADER, "asset_tag", "management_address", "data_address"]


@pytest.fixture
def inventory_admin(django_user_model):
    perms = [f"fleet.{a}_{m}" for a in ("view", "add", "change") for m in ("node", "rack", "gpu", "drive")]
    return client_for(Client, staff_with(django_user_model, "inv", *perms))


def _rows(*pairs):
    racks = Rack.objects.filter(cooling="liquid", hall__name="hall-2", row=0).order_by("column")
    return [
        [f"ad-{i}", f"SN-ad-{i}", rack.name, 1, "b200-sxm-8x", "dc1-ndr-pod01", "leaf-1", "", "", "", "", m, d]
        for i, (rack, (m, d)) in enumerate(zip(racks, pairs, strict=False))
    ]


def _preview(client, rows):
    return client.post(reverse(IMPORT), {"file": csv_upload(rows, header=HEADER)})


@pytest.mark.parametrize("bad", ["127.0.0.1", "0.0.0.0", "224.0.0.5", "169.254.1.1", "::1", "fe80::1", "10.1.2", "x"])
def test_addresses_that_cannot_name_a_node_are_refused(bad):
    with pytest.raises(ValidationError):
        validate_node_address(bad)


@pytest.mark.parametrize("good", ["10.192.0.17", "192.0.2.10", "2001:db8::17"])
def test_unicast_addresses_pass(good):
    validate_node_address(good)


def test_the_seed_gives_every_node_two_distinct_unique_addresses(small_fleet):
    rows = list(Node.objects.values_list("management_address", "data_address"))
    flat = [a for pair in rows for a in pair]
    assert None not in flat and len(set(flat)) == len(flat)


def test_the_database_refuses_a_shared_address(small_fleet):
    first, second = Node.objects.order_by("hostname")[:2]
    with pytest.raises(IntegrityError), transaction.atomic():
        Node.objects.filter(pk=second.pk).update(data_address=first.data_address)
    with pytest.raises(IntegrityError), transaction.atomic():
        Node.objects.filter(pk=first.pk).update(data_address=first.management_address)


def test_the_import_stores_addresses_and_names_every_clash(small_fleet, inventory_admin):
    held = Node.objects.order_by("hostname").first()
    preview = _preview(
        inventory_admin,
        _rows(
            ("10.130.0.1", "10.200.0.1"),
            ("10.130.0.2", "10.200.0.1"),  # the data address of row 2 again
            ("10.130.0.3", held.data_address),  # another node's
            ("127.0.0.1", "10.200.0.4"),  # not a node's address
        ),
    )
    assert preview.status_code == 400
    errors = {(e.row, e.column): e.message for e in preview.context["errors"]}
    assert "row 2 of this file" in errors[(3, "data_address")]
    assert f"already belongs to node {held.hostname}" in errors[(4, "data_address")]
    assert (5, "management_address") in errors
    assert not Node.objects.filter(hostname__startswith="ad-").exists()

    preview = _preview(inventory_admin, _rows(("10.130.0.1", "10.200.0.1")))
    assert preview.status_code == 200, [str(e) for e in preview.context["errors"]]
    assert inventory_admin.post(reverse(IMPORT), {"confirm": "1", "staged": staged_id(preview)}).status_code == 302
    node = Node.objects.get(hostname="ad-0")
    assert (node.management_address, node.data_address) == ("10.130.0.1", "10.200.0.1")


def test_operators_see_both_addresses_on_the_node_page(small_fleet, operator_client):
    node = Node.objects.order_by("hostname").first()
    page = operator_client.get(reverse("admin:fleet_node_change", args=[node.pk])).content.decode()
    assert node.management_address in page and node.data_address in page


def test_the_console_node_page_and_the_ops_api_show_both(small_fleet, operator_client, ops_api):
    node = Node.objects.order_by("hostname").first()
    page = operator_client.get(f"/fleet/nodes/{node.pk}/").content.decode()
    assert f"management {node.management_address}" in page and f"data plane {node.data_address}" in page
    body = ops_api.get(f"/api/v1/ops/nodes/{node.pk}").json()
    assert (body["management_address"], body["data_address"]) == (node.management_address, node.data_address)
