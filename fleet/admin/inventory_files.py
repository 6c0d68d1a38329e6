"""The admin base of inventory sheets: bulk import/export (CSV or XLSX) through
fleet.services.inventory_import — preview with every problem and every update's diff, then confirm,
all or nothing. Import needs the add permission of each sheet's model (and change for updates);
export needs view."""

from django.conf import settings
from django.contrib import messages
from django.contrib.admin.options import IncorrectLookupParameters
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse, HttpResponseBadRequest, StreamingHttpResponse
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import path, reverse

from core.admin import AuditedModelAdmin
from core.services.audit import actor_label

from ..inventory_files import SHEETS, csv_lines, read_workbook, xlsx_bytes
from ..services.inventory_import import (
    BMC_PERMISSION,
    MODEL_OF_SHEET,
    UPDATABLE,
    ImportRejected,
    apply_import,
    claim_staged,
    columns_of,
    plan_import,
    sets_bmc_columns,
    stage_workbook,
)

IMPORT_MAX_BYTES = getattr(settings, "INVENTORY_IMPORT_MAX_BYTES", 8 * 1024 * 1024)
IMPORT_MAX_ROWS = getattr(settings, "INVENTORY_IMPORT_MAX_ROWS", 60_000)
PREVIEW_ROWS_SHOWN = 200


def _perm(sheet: str, action: str) -> str:
    return f"fleet.{action}_{MODEL_OF_SHEET[sheet]._meta.model_name}"


class _Counted:
    """Rows passed through, counted (what an export's audit row says went out)."""

    def __init__(self, rows):
        self.rows, self.count = rows, 0

    def __iter__(self):
        for row in self.rows:
            self.count += 1
            yield row


# ---- import and export -----------------------------------------------------------------------


class InventoryFileAdmin(AuditedModelAdmin):
    """Import and export of this model's sheet; the views check permissions themselves because
    they are not ModelAdmin's own views."""

    sheet = ""
    change_list_template = "admin/fleet/inventory_change_list.html"

    def get_urls(self):
        info = self.opts.app_label, self.opts.model_name
        return [
            path("import/", self.admin_site.admin_view(self.import_view), name="{}_{}_import".format(*info)),
            path("export/", self.admin_site.admin_view(self.export_view), name="{}_{}_export".format(*info)),
            *super().get_urls(),
        ]

    def changelist_view(self, request, extra_context=None):
        extra_context = {
            **(extra_context or {}),
            "can_import": self.has_add_permission(request),
            "can_export": self.has_view_permission(request),
            "import_url": reverse(f"admin:fleet_{self.opts.model_name}_import"),
            "export_url": reverse(f"admin:fleet_{self.opts.model_name}_export"),
        }
        return super().changelist_view(request, extra_context)

    # -- import --
    def import_view(self, request):
        if not self.has_add_permission(request):
            raise PermissionDenied(f"Importing needs the {_perm(self.sheet, 'add')} permission.")
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": f"Import {self.sheet}",
            "sheet": self.sheet,
            "sheets": SHEETS,
            "columns": {s: columns_of(s) for s in SHEETS},
            "max_mb": IMPORT_MAX_BYTES / 1024 / 1024,
            "can_update": self.has_change_permission(request),
            "file_errors": [],
        }
        if request.method == "POST" and "confirm" in request.POST:
            return self._confirm(request, context)
        if request.method == "POST":
            return self._preview(request, context)
        return TemplateResponse(request, "admin/fleet/inventory_import.html", context)

    def _options(self, request) -> dict:
        sheet = request.POST.get("csv_sheet", self.sheet)
        return {
            "csv_sheet": sheet if sheet in SHEETS else self.sheet,
            "allow_updates": request.POST.get("allow_updates") == "on",
        }

    def _allowed_updates(self, request, options) -> set[str]:
        return set(UPDATABLE) if options.get("allow_updates") else set()

    def _check_sheet_permissions(self, request, workbook, allow_updates: set[str]) -> list[str]:
        missing = []
        for sheet in workbook.sheets:
            if not request.user.has_perm(_perm(sheet, "add")):
                missing.append(f"the {sheet} sheet needs {_perm(sheet, 'add')}")
            if sheet in allow_updates and not request.user.has_perm(_perm(sheet, "change")):
                missing.append(f"updating {sheet} needs {_perm(sheet, 'change')}")
        if sets_bmc_columns(workbook) and not request.user.has_perm(BMC_PERMISSION):
            missing.append(f"BMC addresses and MACs (bmc_address, bmc_mac) need {BMC_PERMISSION}")
        return missing

    def _preview(self, request, context):
        upload = request.FILES.get("file")
        options = self._options(request)
        context["options"] = options
        if upload is None:
            context["file_errors"] = ["Choose a CSV or XLSX file to import."]
            return TemplateResponse(request, "admin/fleet/inventory_import.html", context, status=400)
        if upload.size > IMPORT_MAX_BYTES:
            context["file_errors"] = [
                (
                    f"{upload.name} is {upload.size / 1024 / 1024:.1f} MB; an import takes at most {context['max_mb']:.0f} MB "
                    "(tens of thousands of rows). Split the file, e.g. one file per hall or rack row."
                )
            ]
            return TemplateResponse(request, "admin/fleet/inventory_import.html", context, status=413)
        data = upload.read(IMPORT_MAX_BYTES + 1)
        workbook = read_workbook(upload.name, data, csv_sheet=options["csv_sheet"], max_rows=IMPORT_MAX_ROWS)
        allow_updates = self._allowed_updates(request, options)
        missing = self._check_sheet_permissions(request, workbook, allow_updates)
        if missing:
            raise PermissionDenied("; ".join(missing) + ".")
        plan = plan_import(workbook, allow_updates=allow_updates)
        context.update(self._plan_context(plan))
        if plan.ok:
            context["staged"] = stage_workbook(
                workbook=workbook,
                filename=upload.name,
                user_id=request.user.pk,
                options=options,
                expected=plan.snapshot(),
            )
        return TemplateResponse(request, "admin/fleet/inventory_import.html", context, status=200 if plan.ok else 400)

    def _plan_context(self, plan):
        updates = [r for r in plan.rows if r.action == "update"]
        return {
            "plan": plan,
            "counts": plan.counts(),
            "errors": plan.errors,
            "updates": updates[:PREVIEW_ROWS_SHOWN],
            "updates_hidden": max(0, len(updates) - PREVIEW_ROWS_SHOWN),
            "creates": [r for r in plan.rows if r.action == "create"][:PREVIEW_ROWS_SHOWN],
        }

    def _confirm(self, request, context):
        staged = claim_staged(token=request.POST.get("staged", ""), user_id=request.user.pk)
        if staged is None:
            context["file_errors"] = [
                (
                    "This preview was already imported or has expired; nothing more was imported. "
                    "Check the list, or upload the file again."
                )
            ]
            return TemplateResponse(request, "admin/fleet/inventory_import.html", context, status=409)
        filename, workbook, options, expected = staged
        allow_updates = self._allowed_updates(request, options)
        missing = self._check_sheet_permissions(request, workbook, allow_updates)
        if missing:
            raise PermissionDenied("; ".join(missing) + ".")
        try:
            plan = apply_import(
                workbook, allow_updates=allow_updates, actor=actor_label(request.user), expected=expected
            )
        except ImportRejected as rejected:
            context.update(self._plan_context(rejected.plan))
            context["file_errors"] = [
                (
                    "The inventory changed since the preview; nothing was imported. Fix the rows "
                    "below and upload the file again."
                )
            ]
            return TemplateResponse(request, "admin/fleet/inventory_import.html", context, status=409)
        summary = ", ".join(
            f"{sheet}: {c['create']} created, {c['update']} updated" for sheet, c in plan.counts().items()
        )
        self.message_user(request, f"Imported {filename} ({summary}).", messages.SUCCESS)
        return redirect(reverse(f"admin:fleet_{self.opts.model_name}_changelist"))

    # -- export --
    def export_view(self, request):
        if not self.has_view_permission(request):
            raise PermissionDenied(f"Exporting needs the {_perm(self.sheet, 'view')} permission.")
        fmt = request.GET.get("format", "csv")
        if fmt not in ("csv", "xlsx"):
            return HttpResponseBadRequest("format must be csv or xlsx.", content_type="text/plain")
        params = request.GET.copy()
        params.pop("format", None)
        request.GET = params
        try:
            queryset = self.get_changelist_instance(request).get_queryset(request)
        except (IncorrectLookupParameters, ValueError) as exc:
            return HttpResponseBadRequest(
                f"The list filter in this URL is not valid ({exc or 'unknown filter'}); "
                "clear the filters and try again.",
                content_type="text/plain",
            )
        headers = self.export_headers(request)
        rows = _only(columns_of(self.sheet), headers, self.export_rows(queryset))
        filters = params.urlencode()
        if fmt == "csv":
            # streamed: the rows are counted before the first byte leaves, so the trail says how
            # many went out even if the download is cut short
            self.audit_export(request, fmt=fmt, rows={self.sheet: queryset.count()}, filters=filters)
            response = StreamingHttpResponse(csv_lines(headers, rows), content_type="text/csv")
            response["Content-Disposition"] = f'attachment; filename="{self.sheet}.csv"'
            return response
        sheets = [
            (name, columns, _Counted(sheet_rows))
            for name, columns, sheet_rows in [(self.sheet, headers, rows)] + self.extra_export_sheets(request, queryset)
        ]
        body = xlsx_bytes(sheets)
        self.audit_export(request, fmt=fmt, rows={name: counted.count for name, _c, counted in sheets}, filters=filters)
        response = HttpResponse(body, content_type="application/vnd.openxmlformats-officedocument.spreadsheetml.sheet")
        response["Content-Disposition"] = f'attachment; filename="{self.sheet}.xlsx"'
        return response

    def export_headers(self, request) -> list[str]:
        """The columns this user's export carries (a subset of the sheet's, in its order)."""
        return columns_of(self.sheet)

    def export_rows(self, queryset):  # pragma: no cover - each admin says what a row is
        raise NotImplementedError

    def extra_export_sheets(self, request, queryset) -> list:
        return []


def _only(columns: list[str], wanted: list[str], rows):
    """`rows` (in `columns` order) cut down to the `wanted` columns."""
    if wanted == columns:
        yield from rows
        return
    keep = [columns.index(c) for c in wanted]
    for row in rows:
        yield [row[i] for i in keep]


# ---- sites, halls, racks, fabrics, node types ---------------------------------------------------
