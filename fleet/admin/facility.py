"""Admin of where hardware lives: sites, halls, racks with their power feeds and nodes, fabric
domains and node types."""

from django.contrib import admin
from django.urls import reverse
from django.utils.html import format_html

from core.admin import AuditedModelAdmin

from ..models import (
    FabricDomain,
    Hall,
    Node,
    NodeType,
    PowerFeed,
    Rack,
    Site,
)
from .inventory_files import InventoryFileAdmin


@admin.register(Site)
class SiteAdmin(AuditedModelAdmin):
    list_display = ("name", "slug", "region", "pue", "electricity_usd_per_kwh", "grid_kg_co2e_per_kwh")
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
    list_display = ("name", "site", "it_power_budget_kw", "pue")  # the design PUE the planner models
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
