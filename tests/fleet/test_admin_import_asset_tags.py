"""The asset tag in the inventory import/export: an optional nodes column, unique when set (a tag
twice in the file, or already on another node, is a row error naming that node), exported, and
searchable as soon as the import lands."""

import pytest
from django.test import Client
from django.urls import reverse

from fleet.models import Node, Rack

from .admin_helpers import NODE_HEADER, client_for, csv_upload, staff_with, staged_id

pytestmark = pytest.mark.django_db
IMPORT = "admin:fleet_node_import"
HEADER = [*NODE_HEADER, "asset_tag"]


@pytest.fixture
def inventory_admin(django_user_model):
    perms = [f"fleet.{a}_{m}" for a in ("view", "add", "change") for m in ("node", "rack", "gpu", "drive")]
    return client_for(Client, staff_with(django_user_model, "inv", *perms))


def _rows(*tags):
    """One new B200 node per tag, each in its own liquid rack of hall-2 (free slots)."""
    racks = Rack.objects.filter(cooling="liquid", hall__name="hall-2", row=0).order_by("column")
    return [
        [f"at-{i}", f"SN-at-{i}", rack.name, 1, "b200-sxm-8x", "dc1-ndr-pod01", "leaf-1", "", "", "", tag]
        for i, (rack, tag) in enumerate(zip(racks, tags, strict=False))
    ]


def _row_of(node: Node, tag: str) -> list:
    return [node.hostname, node.serial, node.rack.name, node.u_position, node.node_type.slug, "", "", "", "", "", tag]


def _preview(client, rows, **extra):
    return client.post(reverse(IMPORT), {"file": csv_upload(rows, header=HEADER), **extra})


def _confirm(client, preview):
    return client.post(reverse(IMPORT), {"confirm": "1", "staged": staged_id(preview)})


def _exact(ops_api, q):
    hits = ops_api.get("/api/v1/ops/search", {"q": q}).json()["results"]
    return [(h["kind"], h["id"]) for h in hits if h["match"] == "exact"]


def test_imported_asset_tags_are_stored_and_searchable_at_once(small_fleet, inventory_admin, ops_api):
    preview = _preview(inventory_admin, _rows("ACME-9001", "", "ACME-9003"))
    assert preview.status_code == 200, [str(e) for e in preview.context["errors"]]
    assert _confirm(inventory_admin, preview).status_code == 302
    tagged = Node.objects.get(hostname="at-0")
    assert tagged.asset_tag == "ACME-9001" and Node.objects.get(hostname="at-1").asset_tag == ""
    assert _exact(ops_api, "acme-9001") == [("asset_tag", str(tagged.pk))]


def test_an_updated_asset_tag_shows_in_the_diff_and_the_index_follows(small_fleet, inventory_admin, ops_api):
    node = Node.objects.filter(lifecycle="available").order_by("hostname").first()
    preview = _preview(inventory_admin, [_row_of(node, "TAG-OLD")], allow_updates="on")
    assert preview.status_code == 200 and _confirm(inventory_admin, preview).status_code == 302
    preview = _preview(inventory_admin, [_row_of(node, "TAG-NEW")], allow_updates="on")
    assert preview.status_code == 200
    [update] = preview.context["updates"]
    assert update.diff == {"asset_tag": ("TAG-OLD", "TAG-NEW")}
    assert _confirm(inventory_admin, preview).status_code == 302
    node.refresh_from_db()
    assert node.asset_tag == "TAG-NEW"
    assert _exact(ops_api, "TAG-NEW") == [("asset_tag", str(node.pk))] and _exact(ops_api, "TAG-OLD") == []


def test_a_tag_twice_in_the_file_names_the_other_node_and_imports_nothing(small_fleet, inventory_admin):
    preview = _preview(inventory_admin, _rows("DUP-1", "DUP-1"))
    assert preview.status_code == 400
    [error] = preview.context["errors"]
    assert (error.row, error.column, error.value) == (3, "asset_tag", repr("DUP-1"))
    assert "node at-0 on row 2" in error.message
    assert not Node.objects.filter(hostname__startswith="at-").exists()


def test_a_tag_already_on_another_node_names_it_on_create_and_on_update(small_fleet, inventory_admin):
    owner, other = Node.objects.order_by("hostname")[:2]
    Node.objects.filter(pk=owner.pk).update(asset_tag="HELD-1")
    before = other.asset_tag
    preview = _preview(inventory_admin, _rows("HELD-1"))
    assert preview.status_code == 400
    [error] = preview.context["errors"]
    assert error.column == "asset_tag" and f"already belongs to node {owner.hostname}" in error.message

    preview = _preview(inventory_admin, [_row_of(other, "HELD-1")], allow_updates="on")
    assert preview.status_code == 400
    [error] = preview.context["errors"]
    assert error.column == "asset_tag" and owner.hostname in error.message
    other.refresh_from_db()
    assert other.asset_tag == before
    # the owner's own row keeping its tag is no clash
    assert _preview(inventory_admin, [_row_of(owner, "HELD-1")], allow_updates="on").status_code == 200


def test_an_overlong_tag_is_a_row_error(small_fleet, inventory_admin):
    preview = _preview(inventory_admin, _rows("X" * 65))
    assert preview.status_code == 400
    [error] = preview.context["errors"]
    assert error.column == "asset_tag" and "64" in error.message


def test_the_export_carries_the_asset_tag(small_fleet, operator_client):
    node = Node.objects.order_by("hostname").first()
    Node.objects.filter(pk=node.pk).update(asset_tag="EXP-7")
    body = b"".join(operator_client.get(reverse("admin:fleet_node_export"), {"format": "csv"}).streaming_content)
    lines = body.decode().splitlines()
    column = lines[0].split(",").index("asset_tag")
    assert any(line.startswith(node.hostname + ",") and line.split(",")[column] == "EXP-7" for line in lines)
