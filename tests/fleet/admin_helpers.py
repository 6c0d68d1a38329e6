"""Users with chosen Django permissions, and CSV/XLSX uploads, for the admin tests."""

import io
import itertools

from django.contrib.auth.models import Permission
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse
from openpyxl import Workbook

from fleet.models import SanitizationRecord
from tenants.models import Allocation, AllocationNode
from tenants.services.tenants import create_tenant

NODE_HEADER = [
    "hostname",
    "serial",
    "rack",
    "u_position",
    "node_type",
    "fabric_domain",
    "leaf_switch",
    "bmc_address",
    "bmc_mac",
    "commissioned_on",
]


def staff_with(django_user_model, username: str, *codenames: str, is_superuser: bool = False):
    """A staff user holding exactly these permissions ("fleet.add_node" style, or "view:*" for
    every view permission)."""
    user = django_user_model.objects.create_user(
        username, password="pw-" + username * 2, is_staff=True, is_superuser=is_superuser
    )
    perms = []
    for code in codenames:
        if code == "view:*":
            perms += list(Permission.objects.filter(codename__startswith="view_"))
            continue
        app_label, codename = code.split(".")
        perms.append(Permission.objects.get(content_type__app_label=app_label, codename=codename))
    user.user_permissions.set(perms)
    return django_user_model.objects.get(pk=user.pk)  # fresh: no cached permissions


def client_for(client_class, user):
    client = client_class()
    client.force_login(user)
    return client


def csv_upload(rows: list[list], header: list[str] = NODE_HEADER, name: str = "nodes.csv") -> SimpleUploadedFile:
    buffer = io.StringIO()
    buffer.write(",".join(header) + "\n")
    for row in rows:
        buffer.write(",".join("" if v is None else str(v) for v in row) + "\n")
    return SimpleUploadedFile(name, buffer.getvalue().encode(), content_type="text/csv")


def xlsx_upload(sheets: dict[str, tuple[list[str], list[list]]], name: str = "inventory.xlsx") -> SimpleUploadedFile:
    book = Workbook()
    book.remove(book.active)
    for title, (header, rows) in sheets.items():
        sheet = book.create_sheet(title)
        sheet.append(header)
        for row in rows:
            sheet.append(row)
    out = io.BytesIO()
    book.save(out)
    return SimpleUploadedFile(
        name, out.getvalue(), content_type="application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
    )


def staged_id(response) -> str:
    return response.context["staged"]


def _form_values(form) -> dict:
    data = {}
    for name, field in form.fields.items():
        value = form[name].value()
        key = form.add_prefix(name)
        if isinstance(value, bool) or field.widget.__class__.__name__ == "CheckboxInput":
            if value:
                data[key] = "on"
            continue
        if value is None:
            value = ""
        if isinstance(value, (list, tuple)):
            data[key] = [str(v) for v in value]
        else:
            data[key] = str(value)
    return data


def change_form_data(response, **overrides) -> dict:
    """The POST an admin change form would send as rendered (main form and inlines), with overrides."""
    data = _form_values(response.context["adminform"].form)
    for inline in response.context["inline_admin_formsets"]:
        formset = inline.formset
        management = formset.management_form
        for name in management.fields:
            data[management.add_prefix(name)] = str(management[name].value() or 0)
        for form in formset.forms:
            data.update(_form_values(form))
    data.update(overrides)
    return {k: v for k, v in data.items() if v is not None}


INLINE_MANAGEMENT = {
    "gpus-TOTAL_FORMS": 0,
    "gpus-INITIAL_FORMS": 0,
    "drives-TOTAL_FORMS": 0,
    "drives-INITIAL_FORMS": 0,
}


def node_add_data(*, hostname: str, rack, node_type, u_position: int = 1, **fields) -> dict:
    """The POST of the admin's node add form, with its (empty) GPU and drive inlines."""
    return {
        "hostname": hostname,
        "serial": f"SN-{hostname}",
        "node_type": node_type.pk,
        "rack": rack.pk,
        "u_position": u_position,
        **INLINE_MANAGEMENT,
        **fields,
    }


def inventory_admin_client(django_user_model, *actions: str):
    """A staff user "inv" with these actions (view, add, change …) on nodes, racks, GPUs and drives."""
    perms = [f"fleet.{a}_{m}" for a in actions for m in ("node", "rack", "gpu", "drive")]
    return client_for(Client, staff_with(django_user_model, "inv", *perms))


def import_preview(client, upload, **extra):
    return client.post(reverse("admin:fleet_node_import"), {"file": upload, **extra})


def import_confirm(client, preview):
    return client.post(reverse("admin:fleet_node_import"), {"confirm": "1", "staged": staged_id(preview)})


_TENANTS = itertools.count(1)


def serve(node, *, started, ended=None, slug: str | None = None):
    """`node` in an allocation of its own tenant from `started` (to `ended`, or live)."""
    tenant, _ = create_tenant(slug=slug or f"tenant-{next(_TENANTS)}", name="Tenant", max_nodes=8, actor="test")
    allocation = Allocation.objects.create(tenant=tenant, name="job", instance_type=node.node_type, node_count=1)
    AllocationNode.objects.create(allocation=allocation, node=node, started_at=started, ended_at=ended)
    return allocation


def sanitise(drive, at, verified: bool = True):
    """A purge record of `drive` performed at `at`, as an operator would post it."""
    return SanitizationRecord.objects.create(
        drive=drive,
        method="purge",
        technique="NVMe sanitize crypto erase",
        tool="nvme-cli",
        verified=verified,
        actor="test",
        performed_at=at,
        source="operator",
    )
