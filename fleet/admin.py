"""Inventory admin, NetBox-style: filters, search, sensible columns, inline GPUs and drives,
CSV import/export of racks and nodes (validated by each model's clean())."""
from django.contrib import admin, messages
from import_export import fields, resources
from import_export.admin import ImportExportModelAdmin
from import_export.widgets import ForeignKeyWidget

from core.admin import ReadOnlyAdmin
from core.exports import FormulaSafeResourceMixin
from core.services.audit import actor_label
from core.services.permissions import PermissionMissing
from fleet.services.lifecycle import InvalidTransition
from fleet.services.operator_actions import ActionRefused, perform_operator_action

from .models import (
    GPU,
    Drive,
    FabricDomain,
    Hall,
    Node,
    NodeEvent,
    NodeType,
    PowerFeed,
    Rack,
    SanitizationRecord,
    Site,
)


class RackResource(FormulaSafeResourceMixin, resources.ModelResource):
    hall = fields.Field(attribute="hall", column_name="hall", widget=ForeignKeyWidget(Hall, "name"))

    class Meta:
        model = Rack
        fields = ("id", "name", "hall", "row", "column", "u_height", "rated_power_kw", "cooling", "cooling_capacity_kw")
        import_id_fields = ("name",)
        clean_model_instances = True
        skip_unchanged = True


class NodeResource(FormulaSafeResourceMixin, resources.ModelResource):
    rack = fields.Field(attribute="rack", column_name="rack", widget=ForeignKeyWidget(Rack, "name"))
    node_type = fields.Field(attribute="node_type", column_name="node_type", widget=ForeignKeyWidget(NodeType, "slug"))
    fabric_domain = fields.Field(attribute="fabric_domain", column_name="fabric_domain",
                                 widget=ForeignKeyWidget(FabricDomain, "name"))

    class Meta:
        model = Node
        # lifecycle and health are not importable: they change only through the state machine.
        fields = ("id", "hostname", "serial", "rack", "u_position", "node_type", "fabric_domain", "leaf_switch",
                  "bmc_address", "commissioned_on")
        export_order = fields
        import_id_fields = ("hostname",)
        clean_model_instances = True
        skip_unchanged = True


@admin.register(Site)
class SiteAdmin(admin.ModelAdmin):
    list_display = ("name", "slug", "region")
    search_fields = ("name", "slug", "region")
    prepopulated_fields = {"slug": ("name",)}


class RackInline(admin.TabularInline):
    model = Rack
    fields = ("name", "row", "column", "cooling", "rated_power_kw", "cooling_capacity_kw")
    extra = 0
    show_change_link = True


@admin.register(Hall)
class HallAdmin(admin.ModelAdmin):
    list_display = ("name", "site", "it_power_budget_kw", "pue")
    list_filter = ("site",)
    search_fields = ("name", "site__name")
    list_select_related = ("site",)


class PowerFeedInline(admin.TabularInline):
    model = PowerFeed
    extra = 0
    fields = ("name", "voltage", "amperage", "three_phase", "max_utilization_pct")


@admin.register(Rack)
class RackAdmin(ImportExportModelAdmin):
    resource_classes = [RackResource]
    list_display = ("name", "hall", "row", "column", "cooling", "rated_power_kw", "cooling_capacity_kw", "u_height")
    list_filter = ("hall__site", "hall", "cooling")
    search_fields = ("name", "hall__name")
    list_select_related = ("hall", "hall__site")
    inlines = [PowerFeedInline]


@admin.register(FabricDomain)
class FabricDomainAdmin(admin.ModelAdmin):
    list_display = ("name", "site", "technology", "generation", "leaf_count", "spine_count", "max_endpoints")
    list_filter = ("site", "technology", "generation")
    search_fields = ("name",)
    list_select_related = ("site",)


@admin.register(NodeType)
class NodeTypeAdmin(admin.ModelAdmin):
    list_display = ("slug", "gpu_model", "generation", "gpus_per_node", "node_kw", "rack_kw", "cooling_requirement",
                    "cuda_compute_capability", "fabric")
    list_filter = ("generation", "cooling_requirement")
    search_fields = ("slug", "gpu_model", "vendor_model")


class GPUInline(admin.TabularInline):
    model = GPU
    extra = 0
    fields = ("index", "uuid", "serial")


class DriveInline(admin.TabularInline):
    model = Drive
    extra = 0
    fields = ("serial", "model", "capacity_gb", "interface", "self_encrypting", "purge_supported", "last_reported_at",
              "missing_since")
    # what the agent saw is the agent's to say (fleet.services.drive_inventory)
    readonly_fields = ("purge_supported", "last_reported_at", "missing_since")


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


@admin.register(Node)
class NodeAdmin(ImportExportModelAdmin):
    resource_classes = [NodeResource]
    list_display = ("hostname", "rack", "u_position", "node_type", "fabric_domain", "lifecycle", "health", "cordoned",
                    "power_state")
    list_filter = ("lifecycle", "health", "cordoned", "power_state", "node_type__generation", "node_type",
                   "rack__hall__site", "rack__hall")
    search_fields = ("hostname", "serial", "rack__name", "gpus__uuid", "drives__serial")
    list_select_related = ("rack", "node_type", "fabric_domain")
    readonly_fields = ("lifecycle", "target_lifecycle", "state_deadline", "health", "power_state", "last_error",
                       "failed_attempts", "next_attempt_at", "last_heartbeat_at", "created_at", "updated_at")
    fieldsets = (
        (None, {"fields": ("hostname", "serial", "node_type", "rack", "u_position", "fabric_domain", "leaf_switch",
                           "bmc_address", "commissioned_on")}),
        ("State (changed only by the state machine and node actions)", {
            "fields": ("lifecycle", "target_lifecycle", "state_deadline", "health", "power_state", "cordoned",
                       "cordon_reason", "attribution", "last_error", "failed_attempts", "next_attempt_at",
                       "last_heartbeat_at", "created_at", "updated_at"),
        }),
    )
    inlines = [GPUInline, DriveInline, NodeEventInline]
    autocomplete_fields = ("rack",)
    show_full_result_count = False
    actions = ["cordon_nodes", "uncordon_nodes", "drain_nodes"]

    def _node_action(self, request, queryset, action: str):
        """The console's path: each node through perform_operator_action (checked, evented, audited)."""


        done, refused = 0, []
        for node_id, hostname in queryset.values_list("pk", "hostname"):
            try:
                perform_operator_action(node_id=node_id, action=action, actor=actor_label(request.user),
                                    reason="admin bulk action", user=request.user)
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


@admin.register(GPU)
class GPUAdmin(admin.ModelAdmin):
    list_display = ("__str__", "uuid", "serial")
    search_fields = ("uuid", "serial", "node__hostname")
    list_select_related = ("node",)
    raw_id_fields = ("node",)
    show_full_result_count = False


@admin.register(Drive)
class DriveAdmin(admin.ModelAdmin):
    list_display = ("serial", "node", "model", "capacity_gb", "interface", "self_encrypting", "missing_since")
    # what the agent saw is the agent's to say; the exit gate compares rows with its inventory
    readonly_fields = ("purge_supported", "last_reported_at", "missing_since")
    list_filter = ("interface", "self_encrypting")
    search_fields = ("serial", "node__hostname", "model")
    list_select_related = ("node",)
    raw_id_fields = ("node",)
    show_full_result_count = False


@admin.register(SanitizationRecord)
class SanitizationRecordAdmin(ReadOnlyAdmin):
    """Evidence: operators add records through the ops API or the console."""

    list_display = ("drive", "method", "technique", "tool", "verified", "actor", "source", "performed_at")
    list_filter = ("method", "verified", "source")
    search_fields = ("drive__serial", "drive__node__hostname")
    list_select_related = ("drive",)
