"""Inventory admin: the system of record for sites, halls, racks, node types, nodes, GPUs and
drives. NetBox-style lists (filters, search, links), every write audited, and nothing the state
machine or a tenant allocation depends on editable from a form.

Bulk import/export (CSV or XLSX) goes through fleet.services.inventory_import: preview with
every problem and every update's diff, then confirm, all or nothing. Import needs the add
permission of each sheet's model (and change for updates); export needs view."""

import uuid

from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin.options import IncorrectLookupParameters
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.http import HttpResponse, HttpResponseBadRequest, StreamingHttpResponse
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html

from core.admin import AuditedModelAdmin, ReadOnlyAdmin, form_diff
from core.services.audit import actor_label
from core.services.permissions import PermissionMissing

from .inventory_files import SHEETS, csv_lines, read_workbook, xlsx_bytes
from .models import (
    GPU,
    Drive,
    FabricDomain,
    Hall,
    Node,
    NodeAgentAction,
    NodeEvent,
    NodeType,
    PowerFeed,
    Rack,
    SanitizationRecord,
    Site,
)
from .selectors import drive_removal_refusal, hardware_change_refusal
from .services.inventory_import import (
    MODEL_OF_SHEET,
    UPDATABLE,
    ImportRejected,
    apply_import,
    claim_staged,
    columns_of,
    plan_import,
    record_enrolment,
    record_inventory_update,
    stage_workbook,
)
from .services.lifecycle import InvalidTransition
from .services.operator_actions import ActionRefused, perform_operator_action

IMPORT_MAX_BYTES = getattr(settings, "INVENTORY_IMPORT_MAX_BYTES", 8 * 1024 * 1024)
IMPORT_MAX_ROWS = getattr(settings, "INVENTORY_IMPORT_MAX_ROWS", 60_000)
PREVIEW_ROWS_SHOWN = 200


def _perm(sheet: str, action: str) -> str:
    return f"fleet.{action}_{MODEL_OF_SHEET[sheet]._meta.model_name}"


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
                workbook=workbook, filename=upload.name, user_id=request.user.pk, options=options
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
        filename, workbook, options = staged
        allow_updates = self._allowed_updates(request, options)
        missing = self._check_sheet_permissions(request, workbook, allow_updates)
        if missing:
            raise PermissionDenied("; ".join(missing) + ".")
        try:
            plan = apply_import(workbook, allow_updates=allow_updates, actor=actor_label(request.user))
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
        headers = columns_of(self.sheet)
        if fmt == "csv":
            response = StreamingHttpResponse(csv_lines(headers, self.export_rows(queryset)), content_type="text/csv")
            response["Content-Disposition"] = f'attachment; filename="{self.sheet}.csv"'
            return response
        sheets = [(self.sheet, headers, self.export_rows(queryset))] + self.extra_export_sheets(request, queryset)
        response = HttpResponse(
            xlsx_bytes(sheets), content_type="application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
        )
        response["Content-Disposition"] = f'attachment; filename="{self.sheet}.xlsx"'
        return response

    def export_rows(self, queryset):  # pragma: no cover - each admin says what a row is
        raise NotImplementedError

    def extra_export_sheets(self, request, queryset) -> list:
        return []


# ---- sites, halls, racks, fabrics, node types ---------------------------------------------------


@admin.register(Site)
class SiteAdmin(AuditedModelAdmin):
    list_display = ("name", "slug", "region", "electricity_usd_per_kwh", "grid_kg_co2e_per_kwh")
    search_fields = ("name", "slug", "region")
    prepopulated_fields = {"slug": ("name",)}


class RackInline(admin.TabularInline):
    """The hall's racks, to open one; racks are added and changed on their own page."""

    model = Rack
    fields = ("name", "row", "column", "cooling", "rated_power_kw", "cooling_capacity_kw")
    readonly_fields = fields
    extra = 0
    max_num = 0
    can_delete = False
    show_change_link = True
    ordering = ("row", "column")


@admin.register(Hall)
class HallAdmin(AuditedModelAdmin):
    list_display = ("name", "site", "it_power_budget_kw", "pue")
    list_filter = ("site",)
    search_fields = ("name", "site__name")
    list_select_related = ("site",)
    inlines = [RackInline]


class PowerFeedInline(admin.TabularInline):
    model = PowerFeed
    extra = 0
    fields = ("name", "voltage", "amperage", "three_phase", "max_utilization_pct")


class NodeInRackInline(admin.TabularInline):
    """The rack's nodes, top of the rack first, as an elevation reads."""

    model = Node
    fields = ("u_position", "hostname", "serial", "node_type", "lifecycle", "health")
    readonly_fields = fields
    extra = 0
    max_num = 0
    can_delete = False
    show_change_link = True
    verbose_name_plural = "nodes in this rack (by U, top first)"

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("node_type").order_by("-u_position")


@admin.register(Rack)
class RackAdmin(InventoryFileAdmin):
    sheet = "racks"
    list_display = (
        "name",
        "hall",
        "row",
        "column",
        "cooling",
        "rated_power_kw",
        "cooling_capacity_kw",
        "u_height",
        "nodes_link",
    )
    list_filter = ("hall__site", "hall", "row", "cooling")
    search_fields = ("name", "hall__name")
    list_select_related = ("hall", "hall__site")
    inlines = [NodeInRackInline, PowerFeedInline]
    show_full_result_count = False

    @admin.display(description="nodes")
    def nodes_link(self, rack):
        return format_html('<a href="{}?rack={}">nodes</a>', reverse("admin:fleet_node_changelist"), rack.pk)

    def export_rows(self, queryset):
        for rack in queryset.select_related("hall__site").iterator(chunk_size=2000):
            yield [
                rack.name,
                f"{rack.hall.site.slug}/{rack.hall.name}",
                rack.row,
                rack.column,
                rack.u_height,
                rack.rated_power_kw,
                rack.cooling,
                rack.cooling_capacity_kw,
            ]


@admin.register(FabricDomain)
class FabricDomainAdmin(AuditedModelAdmin):
    list_display = ("name", "site", "technology", "generation", "leaf_count", "spine_count", "max_endpoints")
    list_filter = ("site", "technology", "generation")
    search_fields = ("name",)
    list_select_related = ("site",)


@admin.register(NodeType)
class NodeTypeAdmin(AuditedModelAdmin):
    list_display = (
        "slug",
        "gpu_model",
        "generation",
        "gpus_per_node",
        "node_kw",
        "rack_kw",
        "cooling_requirement",
        "cuda_compute_capability",
        "fabric",
    )
    list_filter = ("generation", "cooling_requirement")
    search_fields = ("slug", "gpu_model", "vendor_model")


# ---- nodes and their hardware ---------------------------------------------------------------


class GPUInline(admin.TabularInline):
    model = GPU
    extra = 0
    fields = ("index", "uuid", "serial")

    def get_max_num(self, request, obj=None, **kwargs):
        return obj.node_type.gpus_per_node if obj is not None else None

    def has_add_permission(self, request, obj=None):
        return super().has_add_permission(request, obj) and hardware_change_refusal(obj) is None

    def has_change_permission(self, request, obj=None):
        return super().has_change_permission(request, obj) and hardware_change_refusal(obj) is None

    def has_delete_permission(self, request, obj=None):
        return super().has_delete_permission(request, obj) and hardware_change_refusal(obj) is None


class DriveInline(admin.TabularInline):
    model = Drive
    extra = 0
    fields = (
        "serial",
        "model",
        "capacity_gb",
        "interface",
        "self_encrypting",
        "purge_supported",
        "last_reported_at",
        "missing_since",
    )
    # what the agent saw is the agent's to say (fleet.services.drive_inventory)
    readonly_fields = ("purge_supported", "last_reported_at", "missing_since")

    def has_add_permission(self, request, obj=None):
        return super().has_add_permission(request, obj) and hardware_change_refusal(obj) is None

    def has_change_permission(self, request, obj=None):
        return super().has_change_permission(request, obj) and hardware_change_refusal(obj) is None

    def has_delete_permission(self, request, obj=None):
        return super().has_delete_permission(request, obj) and drive_removal_refusal(obj) is None


class NodeEventInline(admin.TabularInline):
    model = NodeEvent
    extra = 0
    can_delete = False
    fields = ("at", "actor", "action", "from_state", "to_state", "reason")
    readonly_fields = fields
    ordering = ("-at",)
    max_num = 0
    verbose_name_plural = "history (latest first)"

    def get_queryset(self, request):
        return super().get_queryset(request).order_by("-at")

    def has_change_permission(self, request, obj=None):
        return False


class RackFilter(admin.SimpleListFilter):
    """`?rack=<id>` (the rack page links here); shows only the chosen rack, not all of them."""

    title = "rack"
    parameter_name = "rack"

    def lookups(self, request, model_admin):
        value = self.value()
        if not value:
            return []
        rack = Rack.objects.filter(pk=value).first() if _is_uuid(value) else None
        # Always an entry when a value is given: a filter without one is skipped, and an export
        # of "rack=<typo>" must not silently become an export of every node.
        return [(str(rack.pk), rack.name)] if rack else [(value, "unknown rack")]

    def queryset(self, request, queryset):
        value = self.value()
        if not value:
            return queryset
        if not _is_uuid(value):
            raise IncorrectLookupParameters("rack must be a rack id")
        return queryset.filter(rack_id=value)


class RackRowFilter(admin.SimpleListFilter):
    title = "rack row"
    parameter_name = "rack_row"

    def lookups(self, request, model_admin):
        rows = (
            Rack.objects.values_list("hall__site__slug", "hall__name", "row")
            .distinct()
            .order_by("hall__site__slug", "hall__name", "row")
        )
        return [(f"{site}/{hall}/{row}", f"{site}/{hall} row {row}") for site, hall, row in rows]

    def queryset(self, request, queryset):
        value = self.value()
        if not value:
            return queryset
        site, _, rest = value.partition("/")
        hall, _, row = rest.rpartition("/")
        if not (site and hall and row.isdigit()):
            raise IncorrectLookupParameters("rack_row is site/hall/row")
        return queryset.filter(rack__hall__site__slug=site, rack__hall__name=hall, rack__row=int(row))


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


STATE_FIELDS = (
    "lifecycle",
    "target_lifecycle",
    "state_deadline",
    "health",
    "power_state",
    "cordoned",
    "cordon_reason",
    "attribution",
    "drain_requested_at",
    "drain_deadline",
    "last_error",
    "failed_attempts",
    "next_attempt_at",
    "last_heartbeat_at",
    "gpu_power_w",
    "wall_power_w",
    "wall_power_source",
    "wall_power_at",
)


@admin.register(Node)
class NodeAdmin(InventoryFileAdmin):
    sheet = "nodes"
    list_display = (
        "hostname",
        "serial",
        "rack_link",
        "u_position",
        "node_type",
        "fabric_domain",
        "lifecycle",
        "health",
        "cordoned",
        "power_state",
    )
    list_filter = (
        "lifecycle",
        "health",
        "cordoned",
        "power_state",
        "node_type__generation",
        "node_type",
        "rack__hall__site",
        "rack__hall",
        RackRowFilter,
        RackFilter,
    )
    search_fields = ("hostname", "serial", "rack__name", "gpus__uuid", "drives__serial", "bmc_address", "bmc_mac")
    list_select_related = ("rack", "node_type", "fabric_domain")
    fieldsets = (
        (
            None,
            {
                "fields": (
                    "hostname",
                    "serial",
                    "node_type",
                    "rack",
                    "u_position",
                    "fabric_domain",
                    "leaf_switch",
                    "bmc_address",
                    "bmc_mac",
                    "commissioned_on",
                    "allocation",
                )
            },
        ),
        (
            "State (changed only by the state machine and the node actions)",
            {
                "fields": (*STATE_FIELDS, "created_at", "updated_at"),
            },
        ),
    )
    inlines = [GPUInline, DriveInline, NodeEventInline]
    autocomplete_fields = ("rack",)
    show_full_result_count = False
    actions = ["cordon_nodes", "uncordon_nodes", "drain_nodes"]

    @admin.display(description="rack", ordering="rack__name")
    def rack_link(self, node):
        return format_html(
            '<a href="{}">{}</a>', reverse("admin:fleet_rack_change", args=[node.rack_id]), node.rack.name
        )

    @admin.display(description="allocation")
    def allocation(self, node):
        membership = node.allocation_memberships.filter(ended_at__isnull=True).select_related("allocation").first()
        if membership is None:
            return "—"
        return format_html(
            '<a href="{}">{}</a>',
            reverse("admin:tenants_allocation_change", args=[membership.allocation_id]),
            str(membership.allocation),
        )

    def get_readonly_fields(self, request, obj=None):
        fields = [*STATE_FIELDS, "created_at", "updated_at", "allocation"]
        if obj is not None and obj.is_allocated():
            fields += ["rack", "u_position", "node_type", "fabric_domain", "leaf_switch"]
        return fields

    def has_delete_permission(self, request, obj=None):
        # An enrolled node is evidence (events, drives, sanitisation, bills): it leaves the fleet
        # through decommission, retire and dispose, never by deletion.
        return False

    def save_model(self, request, obj, form, change):
        before, after = form_diff(form)
        actor = actor_label(request.user)
        with transaction.atomic():
            super().save_model(request, obj, form, change)
            if not change:
                record_enrolment(obj, actor=actor, reason="enrolled in the admin")
            elif form.changed_data:
                record_inventory_update(
                    obj, actor=actor, changes={f: (before.get(f), after.get(f)) for f in form.changed_data}
                )

    def _node_action(self, request, queryset, action: str):
        """The console's path: each node through perform_operator_action (checked, evented, audited)."""
        done, refused = 0, []
        for node_id, hostname in queryset.values_list("pk", "hostname"):
            try:
                perform_operator_action(
                    node_id=node_id,
                    action=action,
                    actor=actor_label(request.user),
                    reason="admin bulk action",
                    user=request.user,
                )
                done += 1
            except (InvalidTransition, ActionRefused) as exc:
                refused.append(f"{hostname}: {exc.detail}")
            except PermissionMissing as exc:
                self.message_user(request, exc.detail, messages.ERROR)
                return
        if done:
            self.message_user(request, f"{action}: {done} node(s) done.", messages.SUCCESS)
        for line in refused[:20]:
            self.message_user(request, line, messages.WARNING)

    @admin.action(description="Cordon selected nodes", permissions=["change"])
    def cordon_nodes(self, request, queryset):
        self._node_action(request, queryset, "cordon")

    @admin.action(description="Uncordon selected nodes", permissions=["change"])
    def uncordon_nodes(self, request, queryset):
        self._node_action(request, queryset, "uncordon")

    @admin.action(description="Drain selected nodes", permissions=["change"])
    def drain_nodes(self, request, queryset):
        self._node_action(request, queryset, "drain")

    def export_rows(self, queryset):
        for node in queryset.select_related("rack", "node_type", "fabric_domain").iterator(chunk_size=2000):
            yield [
                node.hostname,
                node.serial,
                node.rack.name,
                node.u_position,
                node.node_type.slug,
                node.fabric_domain.name if node.fabric_domain else "",
                node.leaf_switch,
                node.bmc_address,
                node.bmc_mac,
                node.commissioned_on.isoformat() if node.commissioned_on else "",
            ]

    def extra_export_sheets(self, request, queryset):
        sheets = []
        ids = queryset.values("pk")
        if request.user.has_perm("fleet.view_gpu"):
            gpus = GPU.objects.filter(node__in=ids).values_list("node__hostname", "index", "uuid", "serial")
            sheets.append(("gpus", columns_of("gpus"), (list(r) for r in gpus.iterator(chunk_size=5000))))
        if request.user.has_perm("fleet.view_drive"):
            drives = Drive.objects.filter(node__in=ids).values_list(
                "node__hostname", "serial", "model", "capacity_gb", "interface", "self_encrypting"
            )
            sheets.append(("drives", columns_of("drives"), (list(r) for r in drives.iterator(chunk_size=5000))))
        return sheets


@admin.register(GPU)
class GPUAdmin(AuditedModelAdmin):
    list_display = ("__str__", "uuid", "serial")
    search_fields = ("uuid", "serial", "node__hostname")
    list_select_related = ("node",)
    raw_id_fields = ("node",)
    show_full_result_count = False

    def has_delete_permission(self, request, obj=None):
        return super().has_delete_permission(request, obj) and (
            obj is None or hardware_change_refusal(obj.node) is None
        )

    def delete_queryset(self, request, queryset):
        _refuse_locked(queryset.select_related("node"), hardware_change_refusal)
        super().delete_queryset(request, queryset)

    def get_readonly_fields(self, request, obj=None):
        return ("node", "index", "uuid") if obj is not None and hardware_change_refusal(obj.node) else ()


@admin.register(Drive)
class DriveAdmin(AuditedModelAdmin):
    list_display = ("serial", "node", "model", "capacity_gb", "interface", "self_encrypting", "missing_since")
    list_filter = ("interface", "self_encrypting")
    search_fields = ("serial", "node__hostname", "model")
    list_select_related = ("node",)
    raw_id_fields = ("node",)
    show_full_result_count = False

    def has_delete_permission(self, request, obj=None):
        return super().has_delete_permission(request, obj) and (obj is None or drive_removal_refusal(obj.node) is None)

    def delete_queryset(self, request, queryset):
        _refuse_locked(queryset.select_related("node"), drive_removal_refusal)
        super().delete_queryset(request, queryset)

    # what the agent saw is the agent's to say; the exit gate compares rows with its inventory
    AGENT_REPORTED = ("purge_supported", "last_reported_at", "missing_since")

    def get_readonly_fields(self, request, obj=None):
        locked = ("node", "serial") if obj is not None and hardware_change_refusal(obj.node) else ()
        return (*self.AGENT_REPORTED, *locked)


def _refuse_locked(queryset, refusal_of) -> None:
    """The bulk delete action checks each row the way the delete page does."""
    for obj in queryset:
        refusal = refusal_of(obj.node)
        if refusal:
            raise PermissionDenied(f"Nothing deleted: {obj}: {refusal}")


# ---- evidence and plans: read-only ------------------------------------------------------------


@admin.register(SanitizationRecord)
class SanitizationRecordAdmin(ReadOnlyAdmin):
    """Evidence: operators add records through the ops API or the console."""

    list_display = ("drive", "method", "technique", "tool", "verified", "actor", "source", "performed_at")
    list_filter = ("method", "verified", "source")
    search_fields = ("drive__serial", "drive__node__hostname")
    list_select_related = ("drive",)


@admin.register(NodeAgentAction)
class NodeAgentActionAdmin(ReadOnlyAdmin):
    """Work handed to node agents; requested by services, finished by the agent's report."""

    list_display = ("action", "node", "drive", "state", "requested_by", "created_at", "finished_at")
    list_filter = ("action", "state")
    search_fields = ("node__hostname", "drive__serial", "requested_by")
    list_select_related = ("node", "drive")
    show_full_result_count = False
