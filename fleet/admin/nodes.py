"""Admin of nodes: NetBox-style lists and filters, GPUs and drives inline, links to the node's BMC
record, console page, audit rows and history (its own paginated list, fleet.admin.events), and the
state machine's fields never editable from a form (actions go through the operator actions)."""

import uuid

from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.core.exceptions import ObjectDoesNotExist, ValidationError
from django.db import transaction
from django.db.models import Q
from django.urls import reverse
from django.utils.html import format_html

from core.admin import AtScaleAdmin, SortableOnlyChangeList, form_diff
from core.services.audit import actor_label

from ..models import (
    GPU,
    Drive,
    Node,
    NodeBMC,
    Rack,
)
from ..selectors import live_tenancy
from ..services.inventory_import import (
    BMC_COLUMNS,
    columns_of,
    record_enrolment,
    record_inventory_update,
)
from .facility import HallChoicesFilter
from .inventory_files import InventoryFileAdmin
from .node_actions import confirm_or_run
from .parts import hardware_refusal, node_evidence, removal_refusal


class GPUInline(admin.TabularInline):
    model = GPU
    extra = 0
    fields = ("index", "uuid", "serial")

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("node")  # each row's name reads its node

    def get_max_num(self, request, obj=None, **kwargs):
        return obj.node_type.gpus_per_node if obj is not None else None

    def has_add_permission(self, request, obj=None):
        return super().has_add_permission(request, obj) and hardware_refusal(request, obj) is None

    def has_change_permission(self, request, obj=None):
        return super().has_change_permission(request, obj) and hardware_refusal(request, obj) is None

    def has_delete_permission(self, request, obj=None):
        return super().has_delete_permission(request, obj) and hardware_refusal(request, obj) is None


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
    # what the agent saw is the agent's to say (fleet.services.drive_inventory), self-encryption included
    readonly_fields = ("self_encrypting", "purge_supported", "last_reported_at", "missing_since")

    def has_add_permission(self, request, obj=None):
        return super().has_add_permission(request, obj) and hardware_refusal(request, obj) is None

    def has_change_permission(self, request, obj=None):
        return super().has_change_permission(request, obj) and hardware_refusal(request, obj) is None

    def has_delete_permission(self, request, obj=None):
        return super().has_delete_permission(request, obj) and removal_refusal(request, obj) is None


class IdFilter(admin.SimpleListFilter):
    """`?<parameter>=<id>` (a page links here): lists only the chosen object, never all of them as
    choices. `model` is what the id names, `column` the list's column holding it, `label` how the
    object is shown."""

    model = None
    column = ""
    label = "name"

    def lookups(self, request, model_admin):
        value = self.value()
        if not value:
            return []
        found = self.model.objects.filter(pk=value).first() if _is_uuid(value) else None
        # Always an entry when a value is given: a filter without one is skipped, and an export
        # of "rack=<typo>" must not silently become an export of every node.
        return [(str(found.pk), getattr(found, self.label))] if found else [(value, f"unknown {self.title}")]

    def queryset(self, request, queryset):
        value = self.value()
        if not value:
            return queryset
        if not _is_uuid(value):
            raise IncorrectLookupParameters(f"{self.parameter_name} must be a {self.title} id")
        return queryset.filter(**{self.column: value})


class RackFilter(IdFilter):
    """`?rack=<id>` (the rack page links here)."""

    title = "rack"
    parameter_name = "rack"
    model, column = Rack, "rack_id"


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


class DrainPendingFilter(admin.SimpleListFilter):
    """Nodes a drain was asked of that still carry their tenant (fleet_node_drain_pending_idx)."""

    title = "drain pending"
    parameter_name = "drain_pending"

    def lookups(self, request, model_admin):
        return [("yes", "Yes"), ("no", "No")]

    def queryset(self, request, queryset):
        if self.value() == "yes":
            return queryset.filter(drain_requested_at__isnull=False)
        if self.value() == "no":
            return queryset.filter(drain_requested_at__isnull=True)
        return queryset


class TenantChangeList(SortableOnlyChangeList):
    """The node list's page, with each node's live tenant read in one query for the whole page
    (fleet.selectors.live_tenancy, through Node's reverse relation)."""

    def get_results(self, request):
        super().get_results(request)
        held = live_tenancy([node.pk for node in self.result_list])
        for node in self.result_list:
            node.live_tenancy = held.get(node.pk, [])


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


def _nodes_with_gpus(ids) -> Q:
    return Q(pk__in=GPU.objects.filter(pk__in=ids).values("node_id"))  # a semi-join: no duplicate nodes


def _nodes_with_drives(ids) -> Q:
    return Q(pk__in=Drive.objects.filter(pk__in=ids).values("node_id"))


def _nodes_with_bmcs(ids) -> Q:
    return Q(pk__in=NodeBMC.objects.filter(pk__in=ids).values("node_id"))


@admin.register(Node)
class NodeAdmin(InventoryFileAdmin, AtScaleAdmin):
    sheet = "nodes"
    list_display = (
        "hostname",
        "serial",
        "asset_tag",
        "hall",
        "rack_link",
        "u_position",
        "node_type",
        "fabric_domain",
        "lifecycle",
        "health",
        "cordoned",
        "power_state",
        "tenant",
    )
    # sorted only by unique, indexed columns: any other sort is a sort of every node (docs/admin.md)
    sortable_by = ("hostname", "serial")
    list_filter = (
        "lifecycle",
        "health",
        "cordoned",
        DrainPendingFilter,
        "power_state",
        "node_type__generation",
        "node_type",
        "rack__hall__site",
        ("rack__hall", HallChoicesFilter),
        RackRowFilter,
        RackFilter,
    )
    # searched through the index (core.search): exact or prefix, no icontains over joins, no DISTINCT
    search_fields = ("hostname",)
    search_help_text = (
        "Exact or first characters of a hostname, serial, asset tag, BMC address or MAC (for who may view BMC "
        "records), rack, GPU UUID or serial, or drive serial."
    )
    index_search = {
        "hostname": "pk",
        "node_serial": "pk",
        "asset_tag": "pk",
        "bmc_address": _nodes_with_bmcs,
        "bmc_mac": _nodes_with_bmcs,
        "rack_name": "rack_id",
        "gpu_uuid": _nodes_with_gpus,
        "gpu_serial": _nodes_with_gpus,
        "drive_serial": _nodes_with_drives,
    }
    list_select_related = ("rack__hall__site", "node_type", "fabric_domain")
    fieldsets = (
        (None, {"fields": ("links",)}),
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
                    "management_address",
                    "data_address",
                    "asset_tag",
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
    # the node's events have their own paginated list (NodeEventAdmin), linked from the page
    inlines = [GPUInline, DriveInline]
    autocomplete_fields = ("rack", "fabric_domain")
    actions = ["cordon_nodes", "uncordon_nodes", "drain_nodes"]

    def get_changelist(self, request, **kwargs):
        return TenantChangeList

    def get_object(self, request, object_id, from_field=None):
        """The node with everything its page shows in one query: type, rack, hall, site, fabric
        and its BMC record (a reverse one-to-one, so one LEFT JOIN)."""
        if from_field not in (None, "id"):
            return super().get_object(request, object_id, from_field)
        try:
            object_id = Node._meta.pk.to_python(object_id)
        except ValidationError:
            return None
        return (
            self.get_queryset(request)
            .select_related("node_type", "rack__hall__site", "fabric_domain", "bmc")
            .filter(pk=object_id)
            .first()
        )

    @admin.display(description="rack")
    def rack_link(self, node):
        return format_html(
            '<a href="{}">{}</a>', reverse("admin:fleet_rack_change", args=[node.rack_id]), node.rack.name
        )

    @admin.display(description="hall")
    def hall(self, node):
        return str(node.rack.hall)

    @admin.display(description="BMC address")
    def bmc_address(self, node):
        """The BMC record's address (joined in the list's one query), shown only to who may view
        BMC records: where a node's BMC is belongs to that record (docs/bmc.md)."""
        try:
            return node.bmc.address or "—"
        except ObjectDoesNotExist:
            return "—"

    def _may_see_bmcs(self, request) -> bool:
        return request.user.has_perm("fleet.view_nodebmc") or request.user.has_perm("fleet.change_nodebmc")

    def get_index_search(self, request) -> dict:
        """A BMC address or MAC finds its node only for who may view BMC records: otherwise the
        search box would tell anyone which node a BMC address belongs to."""
        if self._may_see_bmcs(request):
            return self.index_search
        return {kind: target for kind, target in self.index_search.items() if kind not in ("bmc_address", "bmc_mac")}

    def get_list_display(self, request):
        columns = list(super().get_list_display(request))
        if self._may_see_bmcs(request):
            columns.insert(columns.index("fabric_domain") + 1, "bmc_address")
        return columns

    def get_list_select_related(self, request):
        related = list(super().get_list_select_related(request))
        return [*related, "bmc"] if self._may_see_bmcs(request) else related

    @admin.display(description="tenant")
    def tenant(self, node):
        held = getattr(node, "live_tenancy", [])
        return ", ".join(sorted({h["tenant"] for h in held})) or "—"

    @admin.display(description="allocation")
    def allocation(self, node):
        evidence = getattr(node, "admin_evidence", None)  # set by node_evidence() for this request
        if evidence is None or evidence.allocation is None:
            return "—"
        allocation_id, name = evidence.allocation
        return format_html(
            '<a href="{}">{}</a>', reverse("admin:tenants_allocation_change", args=[allocation_id]), name
        )

    @admin.display(description="see also")
    def links(self, node):
        """Node ↔ BMC record ↔ console page ↔ audit rows ↔ history, with no query of their own."""
        try:
            bmc = node.bmc
        except ObjectDoesNotExist:
            bmc = None
        bmc_link = (
            format_html('<a href="{}">BMC record</a>', reverse("admin:fleet_nodebmc_change", args=[bmc.pk]))
            if bmc is not None
            else format_html('<a href="{}?node={}">add a BMC record</a>', reverse("admin:fleet_nodebmc_add"), node.pk)
        )
        audit = reverse("admin:core_auditevent_changelist") + f"?object_type=fleet.node&object_id={node.pk}"
        return format_html(
            '<a href="{}">console page</a> · {} · <a href="{}">audit rows</a> · '
            '<a href="{}?node={}">history (node events)</a> · <a href="{}?q={}">GPUs</a> · <a href="{}?q={}">drives</a>',
            reverse("fleet:node-detail", args=[node.pk]),
            bmc_link,
            audit,
            reverse("admin:fleet_nodeevent_changelist"),
            node.pk,
            reverse("admin:fleet_gpu_changelist"),
            node.hostname,
            reverse("admin:fleet_drive_changelist"),
            node.hostname,
        )

    def get_readonly_fields(self, request, obj=None):
        fields = [*STATE_FIELDS, "created_at", "updated_at", "allocation", "links"]
        evidence = node_evidence(request, obj)
        if evidence is not None and evidence.allocated:
            fields += ["rack", "u_position", "node_type", "fabric_domain", "leaf_switch"]
        return fields

    def get_fieldsets(self, request, obj=None):
        fieldsets = super().get_fieldsets(request, obj)
        return fieldsets if obj is not None else fieldsets[1:]  # an unsaved node has nothing to link to

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

    @admin.action(description="Cordon selected nodes", permissions=["change"])
    def cordon_nodes(self, request, queryset):
        return confirm_or_run(self, request, queryset, "cordon")

    @admin.action(description="Uncordon selected nodes", permissions=["change"])
    def uncordon_nodes(self, request, queryset):
        return confirm_or_run(self, request, queryset, "uncordon")

    @admin.action(description="Drain selected nodes", permissions=["change"])
    def drain_nodes(self, request, queryset):
        return confirm_or_run(self, request, queryset, "drain")

    def export_headers(self, request) -> list[str]:
        """Where a node's BMC is belongs to its BMC record: exported only to who may view that."""
        headers = super().export_headers(request)
        if request.user.has_perm("fleet.view_nodebmc"):
            return headers
        return [h for h in headers if h not in BMC_COLUMNS]

    def export_rows(self, queryset):
        for node in queryset.select_related("rack", "node_type", "fabric_domain", "bmc").iterator(chunk_size=2000):
            bmc = getattr(node, "bmc", None)
            yield [
                node.hostname,
                node.serial,
                node.rack.name,
                node.u_position,
                node.node_type.slug,
                node.fabric_domain.name if node.fabric_domain else "",
                node.leaf_switch,
                bmc.address if bmc else "",
                bmc.mac if bmc else "",
                node.commissioned_on.isoformat() if node.commissioned_on else "",
                node.asset_tag,
                node.management_address or "",
                node.data_address or "",
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
