"""Admin import and export through the admin's pages: create-only by default, updates only when
chosen and shown as a diff, every problem at once with row/column/value, all or nothing at
confirm, XLSX with GPUs and drives, size limits, and no 500 for any file."""

import io
import uuid

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from openpyxl import load_workbook

from core.models import AuditEvent
from fleet.models import GPU, Drive, Node, NodeEvent, Rack
from tenants.models import Allocation, AllocationNode
from tenants.services.tenants import create_tenant

from .admin_helpers import (
    NODE_HEADER,
    client_for,
    csv_upload,
    staff_with,
    staged_id,
    xlsx_upload,
)

pytestmark = pytest.mark.django_db
IMPORT = "admin:fleet_node_import"


@pytest.fixture
def inventory_admin(django_user_model):
    perms = [f"fleet.{a}_{m}" for a in ("view", "add", "change") for m in ("node", "rack", "gpu", "drive", "nodebmc")]
    return client_for(Client, staff_with(django_user_model, "inv", *perms))


def _preview(client, upload, **extra):
    return client.post(reverse(IMPORT), {"file": upload, **extra})


def _confirm(client, preview):
    return client.post(reverse(IMPORT), {"confirm": "1", "staged": staged_id(preview)})


def _liquid_racks():
    return list(Rack.objects.filter(cooling="liquid", hall__name="hall-2", row=0).order_by("column"))


def _gpu_uuid() -> str:
    return f"GPU-{uuid.uuid4()}"


def _rack_row_workbook(prefix="r1"):
    """A 16-node rack row: 8 liquid racks × 2 B200 nodes, 8 GPUs and 2 drives each."""
    nodes, gpus, drives = [], [], []
    for rack in _liquid_racks():
        for slot, u in enumerate((1, 11)):
            host = f"{prefix}-{rack.name}-n{slot}"
            nodes.append(
                [
                    host,
                    f"SN-{host}",
                    rack.name,
                    u,
                    "b200-sxm-8x",
                    "dc1-ndr-pod01",
                    f"leaf-{rack.column}",
                    f"bmc-{host}.dc1",
                    "3c:ec:ef:00:00:%02x" % (rack.column * 2 + slot),
                    "2026-11-30",
                ]
            )
            gpus += [[host, i, _gpu_uuid(), f"GSN-{host}-{i}"] for i in range(8)]
            drives += [[host, f"DSN-{host}-{d}", "Samsung PM1743", 7680, "nvme"] for d in range(2)]
    return xlsx_upload(
        {
            "nodes": (NODE_HEADER, nodes),
            "gpus": (["node", "index", "uuid", "serial"], gpus),
            "drives": (["node", "serial", "model", "capacity_gb", "interface"], drives),
        }
    )


def test_a_rack_row_with_gpus_and_drives_imports_from_one_xlsx_atomically(small_fleet, inventory_admin):
    preview = _preview(inventory_admin, _rack_row_workbook())
    assert preview.status_code == 200, [str(e) for e in preview.context["errors"]]
    assert preview.context["counts"] == {
        "nodes": {"create": 16, "update": 0, "unchanged": 0},
        "gpus": {"create": 128, "update": 0, "unchanged": 0},
        "drives": {"create": 32, "update": 0, "unchanged": 0},
    }
    assert not Node.objects.filter(hostname__startswith="r1-").exists()  # a preview writes nothing

    done = _confirm(inventory_admin, preview)
    assert done.status_code == 302
    imported = Node.objects.filter(hostname__startswith="r1-")
    assert imported.count() == 16 and set(imported.values_list("lifecycle", flat=True)) == {"enrolled"}
    assert GPU.objects.filter(node__in=imported).count() == 128
    assert Drive.objects.filter(node__in=imported).count() == 32
    assert NodeEvent.objects.filter(node__in=imported, action="enrol", to_state="enrolled").count() == 16
    audit = AuditEvent.objects.filter(action="node.import_create", actor="user:inv")
    assert audit.count() == 16 and len(audit.first().after["gpus"]) == 8
    assert imported.get(hostname__endswith="r0001-n1").bmc.mac == "3c:ec:ef:00:00:01"


def test_an_existing_hostname_is_an_error_unless_updates_are_chosen(small_fleet, inventory_admin):
    node = Node.objects.order_by("hostname").first()
    before = {f: getattr(node, f) for f in ("rack_id", "node_type_id", "fabric_domain_id", "leaf_switch")}
    address = node.bmc.address
    other = Rack.objects.exclude(pk=node.rack_id).filter(cooling="air").first()
    row = [node.hostname, node.serial, other.name, 30, "h200-sxm-8x", "", "", "", "", ""]
    preview = _preview(inventory_admin, csv_upload([row]))
    assert preview.status_code == 400
    [error] = preview.context["errors"]
    assert (error.row, error.column, error.value) == (2, "hostname", repr(node.hostname))
    assert "already exists" in error.message and "update existing rows" in error.message
    assert "staged" not in preview.context
    node.refresh_from_db()
    assert {f: getattr(node, f) for f in before} == before and node.bmc.address == address


def test_updates_show_a_diff_keep_empty_cells_and_leave_an_event_and_audit_row(small_fleet, inventory_admin):
    node = Node.objects.filter(lifecycle="available").order_by("hostname").first()
    fabric, bmc = node.fabric_domain_id, node.bmc.address
    row = [node.hostname, node.serial, node.rack.name, node.u_position, node.node_type.slug, "", "leaf-new", "", "", ""]
    preview = _preview(inventory_admin, csv_upload([row]), allow_updates="on")
    assert preview.status_code == 200
    [update] = preview.context["updates"]
    assert update.diff == {"leaf_switch": (node.leaf_switch, "leaf-new")}
    assert "leaf_switch" in preview.content.decode() and "leaf-new" in preview.content.decode()
    assert _confirm(inventory_admin, preview).status_code == 302
    node.refresh_from_db()
    node.bmc.refresh_from_db()
    assert node.leaf_switch == "leaf-new" and node.fabric_domain_id == fabric and node.bmc.address == bmc
    assert NodeEvent.objects.filter(node=node, action="inventory_update").exists()
    assert AuditEvent.objects.get(action="node.import_update", object_id=str(node.pk)).after == {
        "leaf_switch": "leaf-new"
    }


def test_an_allocated_node_cannot_be_moved_or_retyped_by_import(small_fleet, inventory_admin):
    node = Node.objects.order_by("hostname").first()
    tenant = create_tenant(slug="acme", name="Acme", max_nodes=8, actor="test")[0]
    allocation = Allocation.objects.create(tenant=tenant, name="job", instance_type=node.node_type, node_count=1)
    AllocationNode.objects.create(allocation=allocation, node=node, started_at=timezone.now())
    other = Rack.objects.exclude(pk=node.rack_id).filter(cooling="air").first()
    row = [node.hostname, node.serial, other.name, 30, "h200-sxm-8x", "", "", "", "", ""]
    preview = _preview(inventory_admin, csv_upload([row]), allow_updates="on")
    assert preview.status_code == 400
    assert {e.column for e in preview.context["errors"]} == {"rack", "u_position", "node_type"}
    assert all("carries a tenant allocation" in e.message for e in preview.context["errors"])
    node.refresh_from_db()
    assert node.rack_id != other.pk


def test_a_hostname_twice_in_one_file_is_an_error_and_nothing_is_imported(small_fleet, inventory_admin):
    racks = _liquid_racks()
    rows = [
        ["dup-1", "SN-D1", racks[0].name, 1, "b200-sxm-8x", "", "", "", "", ""],
        ["dup-1", "SN-D2", racks[1].name, 1, "b200-sxm-8x", "", "", "", "", ""],
    ]
    preview = _preview(inventory_admin, csv_upload(rows), allow_updates="on")
    assert preview.status_code == 400
    [error] = preview.context["errors"]
    assert error.row == 3 and error.column == "hostname" and "first on row 2" in error.message
    assert not Node.objects.filter(hostname="dup-1").exists()


def test_every_problem_in_the_file_is_reported_at_once_with_row_column_and_value(small_fleet, inventory_admin):
    racks = _liquid_racks()
    rows = [
        ["ok-1", "SN-OK1", racks[0].name, 1, "b200-sxm-8x", "", "", "", "", ""],
        ["gpu 01 ; rm -rf /", "SN-X", racks[1].name, 1, "b200-sxm-8x", "", "", "", "", ""],
        ["ok-3", "SN-OK3", "no-such-rack", 1, "b200-sxm-8x", "", "", "", "", ""],
        ["ok-4", "SN-OK4", racks[2].name, "twelve", "b200-sxm-8x", "", "", "3c:ec:ef:12:34:56", "", ""],
        ["ok-5", "SN-OK5", racks[3].name, 1, "b200-sxm-8x", "nope", "", "fe80::1%eth0", "zz", "31/12/2026"],
    ]
    preview = _preview(inventory_admin, csv_upload(rows))
    assert preview.status_code == 400
    found = {(e.row, e.column) for e in preview.context["errors"]}
    assert {
        (3, "hostname"),
        (4, "rack"),
        (5, "u_position"),
        (5, "bmc_address"),
        (6, "fabric_domain"),
        (6, "bmc_address"),
        (6, "bmc_mac"),
        (6, "commissioned_on"),
    } <= found
    by_cell = {(e.row, e.column): e for e in preview.context["errors"]}
    assert "no rack has this name" in by_cell[(4, "rack")].message and by_cell[(4, "rack")].value == "'no-such-rack'"
    assert "BMC MAC" in by_cell[(5, "bmc_address")].message
    assert "zone-scoped" in by_cell[(6, "bmc_address")].message
    assert "YYYY-MM-DD" in by_cell[(6, "commissioned_on")].message
    html = preview.content.decode()
    assert "Traceback" not in html and "ConversionSyntax" not in html and "matching query" not in html
    assert not Node.objects.filter(hostname__startswith="ok-").exists()


@pytest.mark.parametrize(
    "header, message",
    [
        (["serial", "rack", "u_position", "node_type"], "required column is missing"),
        (NODE_HEADER + ["colour"], "unknown column"),
    ],
)
def test_a_bad_header_is_a_clear_error_not_a_traceback(small_fleet, inventory_admin, header, message):
    preview = _preview(inventory_admin, csv_upload([["x"] * len(header)], header=header))
    assert preview.status_code == 400
    assert message in preview.content.decode() and "Traceback" not in preview.content.decode()


@pytest.mark.parametrize(
    "name, content",
    [
        ("nodes.xlsx", b"PK\x03\x04 not really a zip"),
        ("nodes.csv", b"\xff\xfe\x00h\x00o"),
        ("nodes.pdf", b"%PDF-1.4"),
        ("nodes.csv", b""),
        ("nodes.csv", b'hostname,serial\n"unterminated,x\n'),
    ],
)
def test_unreadable_files_are_refused_with_a_message(small_fleet, inventory_admin, name, content):
    from django.core.files.uploadedfile import SimpleUploadedFile

    preview = _preview(inventory_admin, SimpleUploadedFile(name, content))
    assert preview.status_code == 400
    assert preview.context["errors"] and "Traceback" not in preview.content.decode()


def test_a_file_over_the_size_limit_is_refused_before_it_is_read(small_fleet, inventory_admin, settings, monkeypatch):
    monkeypatch.setattr("fleet.admin.inventory_files.IMPORT_MAX_BYTES", 1024)
    big = csv_upload([[f"n{i}", f"S{i}", "r", 1, "t", "", "", "", "", ""] for i in range(100)])
    preview = _preview(inventory_admin, big)
    assert preview.status_code == 413
    assert "at most" in preview.content.decode() and "Split the file" in preview.content.decode()


def test_confirm_re_validates_and_applies_nothing_if_the_inventory_changed(small_fleet, inventory_admin):
    racks = _liquid_racks()
    rows = [[f"late-{i}", f"SN-L{i}", racks[i].name, 1, "b200-sxm-8x", "", "", "", "", ""] for i in range(4)]
    preview = _preview(inventory_admin, csv_upload(rows))
    assert preview.status_code == 200
    # someone else takes rack 3's U1 between preview and confirm
    Node.objects.create(
        hostname="sneaked-in",
        serial="SN-SNEAK",
        rack=racks[3],
        u_position=1,
        node_type=Node.objects.first().node_type.__class__.objects.get(slug="b200-sxm-8x"),
    )
    confirm = _confirm(inventory_admin, preview)
    assert confirm.status_code == 409
    assert any("overlaps sneaked-in" in e.message and e.row == 5 for e in confirm.context["errors"])
    assert not Node.objects.filter(hostname__startswith="late-").exists()


def test_a_double_submitted_confirm_imports_once_and_answers_clearly(small_fleet, inventory_admin):
    racks = _liquid_racks()
    preview = _preview(
        inventory_admin, csv_upload([["once-1", "SN-ONCE", racks[0].name, 1, "b200-sxm-8x", "", "", "", "", ""]])
    )
    assert _confirm(inventory_admin, preview).status_code == 302
    again = _confirm(inventory_admin, preview)
    assert again.status_code == 409
    assert "already imported" in again.content.decode()
    assert Node.objects.filter(hostname="once-1").count() == 1
    bogus = inventory_admin.post(reverse(IMPORT), {"confirm": "1", "staged": "../../etc/passwd"})
    assert bogus.status_code == 409


def test_a_staged_file_belongs_to_the_user_who_previewed_it(small_fleet, inventory_admin, django_user_model):
    racks = _liquid_racks()
    preview = _preview(
        inventory_admin, csv_upload([["mine-1", "SN-MINE", racks[0].name, 1, "b200-sxm-8x", "", "", "", "", ""]])
    )
    other = client_for(Client, staff_with(django_user_model, "other", "fleet.add_node", "fleet.view_node"))
    assert other.post(reverse(IMPORT), {"confirm": "1", "staged": staged_id(preview)}).status_code == 409
    assert not Node.objects.filter(hostname="mine-1").exists()


def test_gpus_beyond_the_node_types_count_and_bad_uuids_are_refused(small_fleet, inventory_admin):
    node = Node.objects.filter(lifecycle="available").order_by("hostname").first()
    upload = xlsx_upload(
        {
            "gpus": (
                ["node", "index", "uuid"],
                [[node.hostname, 8, _gpu_uuid()], [node.hostname, 0, _gpu_uuid()], ["ghost", 1, "not-a-uuid"]],
            )
        }
    )
    preview = _preview(inventory_admin, upload)
    assert preview.status_code == 400
    by_cell = {(e.row, e.column): e.message for e in preview.context["errors"]}
    assert "8 GPUs (indexes 0-7)" in by_cell[(2, "index")]
    assert "already has a GPU at index 0" in by_cell[(3, "index")]
    assert "no node has this hostname" in by_cell[(4, "node")]
    assert GPU.objects.filter(node=node).count() == 8


def test_racks_import_with_their_hall_and_are_checked_for_grid_clashes(small_fleet, django_user_model):
    client = client_for(Client, staff_with(django_user_model, "racker", "fleet.view_rack", "fleet.add_rack"))
    header = ["name", "hall", "row", "column", "u_height", "rated_power_kw", "cooling", "cooling_capacity_kw"]
    upload = csv_upload(
        [
            ["new-r1", "hall-2", 5, 0, 42, "140", "liquid", "140"],
            ["new-r2", "hall-2", 0, 0, 42, "abc", "liquid", "140"],
        ],
        header=header,
        name="racks.csv",
    )
    preview = client.post(reverse("admin:fleet_rack_import"), {"file": upload, "csv_sheet": "racks"})
    assert preview.status_code == 400
    messages = {(e.row, e.column): e.message for e in preview.context["errors"]}
    assert "not a number" in messages[(3, "rated_power_kw")]
    upload = csv_upload([["new-r1", "hall-2", 5, 0, 42, "140", "liquid", "140"]], header=header, name="racks.csv")
    preview = client.post(reverse("admin:fleet_rack_import"), {"file": upload, "csv_sheet": "racks"})
    assert preview.status_code == 200
    assert (
        client.post(reverse("admin:fleet_rack_import"), {"confirm": "1", "staged": staged_id(preview)}).status_code
        == 302
    )
    assert Rack.objects.get(name="new-r1").hall.name == "hall-2"
    assert AuditEvent.objects.filter(action="rack.import_create").count() == 1


def test_export_escapes_formula_cells_and_refuses_unknown_filters(small_fleet, operator_client):
    Node.objects.filter(hostname="dc1-gpu00001").update(leaf_switch='=HYPERLINK("http://x")')
    body = b"".join(
        operator_client.get(reverse("admin:fleet_node_export"), {"format": "csv"}).streaming_content
    ).decode()
    assert "'=HYPERLINK" in body and "\n=HYPERLINK" not in body and ",=HYPERLINK" not in body
    xlsx = operator_client.get(reverse("admin:fleet_node_export"), {"format": "xlsx"})
    book = load_workbook(io.BytesIO(xlsx.content), read_only=True)
    assert book.sheetnames == ["nodes", "gpus", "drives"]
    cells = [c for row in book["nodes"].iter_rows(values_only=True) for c in row if isinstance(c, str)]
    assert '\'=HYPERLINK("http://x")' in cells
    assert sum(1 for _ in book["gpus"].iter_rows()) == 65
    assert (
        operator_client.get(reverse("admin:fleet_node_export"), {"format": "csv", "bogus__lookup": "1"}).status_code
        == 400
    )
    assert operator_client.get(reverse("admin:fleet_node_export"), {"format": "pdf"}).status_code == 400
    assert operator_client.get(reverse("admin:fleet_node_export"), {"rack": "not-a-uuid"}).status_code == 400


def test_exported_nodes_import_back_unchanged(small_fleet, inventory_admin, operator_client):
    body = b"".join(operator_client.get(reverse("admin:fleet_node_export"), {"format": "csv"}).streaming_content)
    from django.core.files.uploadedfile import SimpleUploadedFile

    preview = _preview(inventory_admin, SimpleUploadedFile("nodes.csv", body), allow_updates="on")
    assert preview.status_code == 200, [str(e) for e in preview.context["errors"]]
    assert preview.context["counts"] == {"nodes": {"create": 0, "update": 0, "unchanged": 8}}


def test_imported_nodes_gpus_and_drives_are_searchable_at_once(small_fleet, inventory_admin, ops_api):
    """The import bulk-creates (no post_save): its writer puts the new identifiers in the search index."""
    _confirm(inventory_admin, _preview(inventory_admin, _rack_row_workbook(prefix="idx")))
    node = Node.objects.filter(hostname__startswith="idx-").order_by("hostname").first()
    gpu, drive = node.gpus.first(), node.drives.first()
    for q, kind, object_id in (
        (node.hostname, "hostname", node.pk),
        (gpu.uuid, "gpu_uuid", gpu.pk),
        (drive.serial, "drive_serial", drive.pk),
        (node.bmc.mac.upper().replace(":", "-"), "bmc_mac", node.bmc.pk),
    ):
        hits = ops_api.get("/api/v1/ops/search", {"q": q}).json()["results"]
        assert [(h["kind"], h["id"]) for h in hits if h["match"] == "exact"] == [(kind, str(object_id))], q
