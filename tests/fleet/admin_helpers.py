"""Users with chosen Django permissions, and CSV/XLSX uploads, for the admin tests."""

import io

from django.contrib.auth.models import Permission
from django.core.files.uploadedfile import SimpleUploadedFile
from openpyxl import Workbook

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
