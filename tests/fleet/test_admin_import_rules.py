"""The import applies what its preview showed (issue 42, docs/admin.md): every required cell is
required in every sheet (an empty one is an error naming row and column, never a 500 and never a
silently dropped row); hostnames are one name whatever their letter case, in the file, the
database and the admin form; a row whose stored values changed after the preview is refused at
confirm instead of overwritten; a drive's self-encryption is the agent's to report."""

import pytest
from django.db import IntegrityError, transaction
from django.test import Client
from django.urls import reverse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleet.inventory_files import Sheet, Workbook
from fleet.models import GPU, Drive, Node, NodeBMC, Rack
from fleet.services.inventory_import import plan_import
from fleet.services.inventory_import.columns import SPECS

from .admin_helpers import (
    NODE_HEADER,
    client_for,
    csv_upload,
    import_confirm,
    import_preview,
    inventory_admin_client,
    node_add_data,
    staff_with,
    xlsx_upload,
)

pytestmark = pytest.mark.django_db
GPU_HEADER = ["node", "index", "uuid", "serial"]
DRIVE_HEADER = ["node", "serial", "model", "capacity_gb", "interface"]
RACK_HEADER = ["name", "hall", "row", "column", "u_height", "rated_power_kw", "cooling", "cooling_capacity_kw"]


@pytest.fixture
def inventory_admin(django_user_model):
    return inventory_admin_client(django_user_model, "view", "add", "change")


def bmc_importer(django_user_model):
    """An inventory admin who may also write BMC records (a nodes sheet's BMC columns)."""
    perms = [f"fleet.{a}_{m}" for a in ("view", "add", "change") for m in ("node", "rack", "gpu", "drive", "nodebmc")]
    return client_for(Client, staff_with(django_user_model, "inv-bmc", *perms))


def _liquid_rack():
    return Rack.objects.filter(cooling="liquid", hall__name="hall-2").order_by("row", "column").first()


def _valid_rows() -> dict[str, tuple[list[str], list]]:
    """One valid row per sheet: a new rack, a new node in a liquid rack, a GPU and a drive of it."""
    return {
        "racks": (RACK_HEADER, ["new-rack-1", "hall-2", 9, 9, 42, 40, "air", 40]),
        "nodes": (NODE_HEADER[:5], ["req-node-1", "SN-REQ-1", _liquid_rack().name, 1, "b200-sxm-8x"]),
        "gpus": (GPU_HEADER, ["req-node-1", 0, "GPU-11111111-2222-3333-4444-555555555555", "GSN-1"]),
        "drives": (DRIVE_HEADER, ["req-node-1", "DSN-REQ-1", "Samsung PM1743", 7680, "nvme"]),
    }


REQUIRED = [(sheet, c.name) for sheet, (_key, columns) in SPECS.items() for c in columns if c.required]


@pytest.mark.parametrize("sheet, column", REQUIRED)
def test_an_empty_required_cell_is_an_error_naming_its_row_and_column(small_fleet, inventory_admin, sheet, column):
    rows = _valid_rows()
    header, row = rows[sheet]
    row = list(row)
    row[header.index(column)] = None
    sheets = {sheet: (header, [row])}
    if sheet in ("gpus", "drives"):  # their node comes in the same workbook
        sheets = {"nodes": (rows["nodes"][0], [rows["nodes"][1]]), **sheets}
    preview = import_preview(inventory_admin, xlsx_upload(sheets))
    assert preview.status_code == 400, (sheet, column)
    errors = preview.context["errors"]
    mine = [e for e in errors if (e.sheet, e.row, e.column) == (sheet, 2, column)]
    assert mine and "required" in mine[0].message, [str(e) for e in errors]
    assert all(e.sheet == sheet for e in errors)  # the other sheets' rows were fine
    assert not Node.objects.filter(hostname="req-node-1").exists()
    assert not Rack.objects.filter(name="new-rack-1").exists()


def test_the_valid_rows_import(small_fleet, inventory_admin):
    rows = _valid_rows()
    preview = import_preview(inventory_admin, xlsx_upload({s: (h, [r]) for s, (h, r) in rows.items()}))
    assert preview.status_code == 200, [str(e) for e in preview.context["errors"]]
    assert import_confirm(inventory_admin, preview).status_code == 302
    node = Node.objects.get(hostname="req-node-1")
    assert GPU.objects.filter(node=node).count() == 1 and Drive.objects.filter(node=node).count() == 1


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(blank=st.sets(st.sampled_from(["hostname", "serial", "rack", "u_position", "node_type"]), min_size=1))
def test_each_blank_required_cell_of_a_new_node_has_its_own_error(small_fleet, blank):
    header = NODE_HEADER[:5]
    row = ["req-node-1", "SN-REQ-1", _liquid_rack().name, 1, "b200-sxm-8x"]
    cells = [None if h in blank else v for h, v in zip(header, row)]
    plan = plan_import(Workbook({"nodes": Sheet("nodes", header, [(2, cells)])}, []))
    found = {e.column for e in plan.errors}
    # a blank key names no node, so that row has that one error; otherwise one per blank cell
    assert found == ({"hostname"} if "hostname" in blank else blank)
    assert plan.rows == []


def test_an_update_row_still_needs_its_key_but_keeps_stored_values_for_other_empty_cells(small_fleet):
    node = Node.objects.filter(lifecycle="available").order_by("hostname").first()
    header = [*NODE_HEADER[:5], "leaf_switch"]
    keep = Workbook({"nodes": Sheet("nodes", header, [(2, [node.hostname, None, None, None, None, "leaf-9"])])}, [])
    plan = plan_import(keep, allow_updates={"nodes"})
    assert plan.ok and plan.rows[0].diff == {"leaf_switch": (node.leaf_switch, "leaf-9")}
    keyless = Workbook({"nodes": Sheet("nodes", header, [(2, [None, None, None, None, None, "leaf-9"])])}, [])
    [error] = plan_import(keyless, allow_updates={"nodes"}).errors
    assert (error.row, error.column) == (2, "hostname") and "names no node" in error.message


# ---- hostnames are one name whatever their case ---------------------------------------------


def test_an_upper_case_twin_of_a_hostname_is_refused_by_the_import(small_fleet, inventory_admin):
    node = Node.objects.order_by("hostname").first()
    twin = node.hostname.upper()
    for updates in ("", "on"):
        row = [twin, "SN-TWIN", _liquid_rack().name, 1, "b200-sxm-8x", "", "", "", "", ""]
        preview = import_preview(inventory_admin, csv_upload([row]), allow_updates=updates)
        assert preview.status_code == 400
        [error] = preview.context["errors"]
        assert error.column == "hostname" and "other letter case" in error.message and node.hostname in error.message
    assert not Node.objects.filter(hostname=twin).exists()


def test_two_rows_differing_only_in_case_are_a_duplicate(small_fleet, inventory_admin):
    rack = _liquid_rack()
    rows = [
        ["case-a", "SN-CA", rack.name, 1, "b200-sxm-8x", "", "", "", "", ""],
        ["CASE-A", "SN-CB", rack.name, 11, "b200-sxm-8x", "", "", "", "", ""],
    ]
    preview = import_preview(inventory_admin, csv_upload(rows))
    assert preview.status_code == 400
    [error] = preview.context["errors"]
    assert error.row == 3 and "appears twice" in error.message


def test_a_gpu_row_may_name_its_node_in_any_case(small_fleet):
    rows = _valid_rows()
    gpu_row = list(rows["gpus"][1])
    gpu_row[0] = "REQ-NODE-1"
    book = Workbook(
        {
            "nodes": Sheet("nodes", rows["nodes"][0], [(2, rows["nodes"][1])]),
            "gpus": Sheet("gpus", GPU_HEADER, [(2, gpu_row)]),
        },
        [],
    )
    plan = plan_import(book)
    assert plan.ok, [str(e) for e in plan.errors]
    assert plan.new_gpus[0].node.hostname == "req-node-1"


def test_the_database_refuses_a_case_twin(small_fleet):
    node = Node.objects.order_by("hostname").first()
    twin = Node(
        hostname=node.hostname.upper(),
        serial="SN-TWIN",
        rack=_liquid_rack(),
        u_position=1,
        node_type=node.node_type,
    )
    with pytest.raises(IntegrityError), transaction.atomic():
        twin.save()


def test_the_admin_form_refuses_a_case_twin_with_a_message(small_fleet, admin_client):
    node = Node.objects.order_by("hostname").first()
    response = admin_client.post(
        reverse("admin:fleet_node_add"),
        node_add_data(hostname=node.hostname.upper(), rack=_liquid_rack(), node_type=node.node_type),
    )
    assert response.status_code == 200
    assert "other letter case" in response.content.decode()
    assert not Node.objects.filter(hostname=node.hostname.upper()).exists()


# ---- the confirm applies what the preview showed ---------------------------------------------


def test_a_colleagues_change_after_the_preview_is_not_overwritten(small_fleet, django_user_model):
    """The issue's case: the preview shows only leaf_switch; a colleague then sets bmc_address
    (on the node's BMC record, where it lives); the confirm must not put the file's (old)
    bmc_address back. The file writes BMC values, so its importer holds change_nodebmc."""
    importer = bmc_importer(django_user_model)
    node = Node.objects.filter(lifecycle="available").order_by("hostname").first()
    row = [
        node.hostname,
        node.serial,
        node.rack.name,
        node.u_position,
        node.node_type.slug,
        node.fabric_domain.name,
        "leaf-new",
        node.bmc.address,
        node.bmc.mac,
        "",
    ]
    preview = import_preview(importer, csv_upload([row]), allow_updates="on")
    assert preview.status_code == 200
    assert [u.diff for u in preview.context["updates"]] == [{"leaf_switch": (node.leaf_switch, "leaf-new")}]

    NodeBMC.objects.filter(node=node).update(address="10.99.0.7")  # a colleague, meanwhile

    confirm = import_confirm(importer, preview)
    assert confirm.status_code == 409
    [error] = confirm.context["errors"]
    assert error.column == "bmc_address" and "changed since the preview" in error.message
    assert "10.99.0.7" in error.message
    node.refresh_from_db()
    assert NodeBMC.objects.get(node=node).address == "10.99.0.7" and node.leaf_switch != "leaf-new"


def test_a_file_without_bmc_values_neither_checks_nor_shows_the_bmc_record(small_fleet, inventory_admin):
    """A file that leaves the BMC cells empty cannot overwrite the BMC record, so a colleague's
    BMC change does not refuse it, and its importer (no BMC permission) is told nothing of it."""
    node = Node.objects.filter(lifecycle="available").order_by("hostname").first()
    row = [node.hostname, node.serial, node.rack.name, node.u_position, node.node_type.slug, "", "leaf-new", "", "", ""]
    preview = import_preview(inventory_admin, csv_upload([row]), allow_updates="on")
    assert preview.status_code == 200
    assert node.bmc.address not in preview.content.decode()
    NodeBMC.objects.filter(node=node).update(address="10.99.0.8")
    assert import_confirm(inventory_admin, preview).status_code == 302
    node.refresh_from_db()
    assert node.leaf_switch == "leaf-new" and NodeBMC.objects.get(node=node).address == "10.99.0.8"


def test_a_row_created_by_someone_else_after_the_preview_is_refused(small_fleet, inventory_admin):
    rack = _liquid_rack()
    row = ["late-1", "SN-LATE-1", rack.name, 1, "b200-sxm-8x", "", "", "", "", ""]
    preview = import_preview(inventory_admin, csv_upload([row]), allow_updates="on")
    assert preview.context["counts"] == {"nodes": {"create": 1, "update": 0, "unchanged": 0}}
    other = _liquid_rack()
    Node.objects.create(
        hostname="late-1", serial="SN-OTHER", rack=other, u_position=21, node_type=Node.objects.first().node_type
    )
    confirm = import_confirm(inventory_admin, preview)
    assert confirm.status_code == 409
    assert "created by someone else since the preview" in " ".join(e.message for e in confirm.context["errors"])
    assert Node.objects.get(hostname="late-1").serial == "SN-OTHER"


def test_an_unchanged_row_that_changed_after_the_preview_is_refused(small_fleet, inventory_admin):
    node = Node.objects.filter(lifecycle="available").order_by("hostname").first()
    row = [node.hostname, node.serial, node.rack.name, node.u_position, node.node_type.slug, "", "", "", "", ""]
    preview = import_preview(inventory_admin, csv_upload([row]), allow_updates="on")
    assert preview.context["counts"] == {"nodes": {"create": 0, "update": 0, "unchanged": 1}}
    Node.objects.filter(pk=node.pk).update(serial="SN-RELABELLED")
    confirm = import_confirm(inventory_admin, preview)
    assert confirm.status_code == 409
    node.refresh_from_db()
    assert node.serial == "SN-RELABELLED"


def test_a_drives_self_encryption_is_not_imported(small_fleet, inventory_admin):
    rows = _valid_rows()
    header = [*DRIVE_HEADER, "self_encrypting"]
    sheets = {
        "nodes": (rows["nodes"][0], [rows["nodes"][1]]),
        "drives": (header, [[*rows["drives"][1], True], [*rows["drives"][1][:1], "DSN-REQ-2", "m", 10, "nvme", None]]),
    }
    preview = import_preview(inventory_admin, xlsx_upload(sheets))
    assert preview.status_code == 400
    [error] = preview.context["errors"]
    assert (error.row, error.column) == (2, "self_encrypting") and "reported by the node agent" in error.message
