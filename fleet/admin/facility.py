"""Admin of where hardware lives: sites, halls, racks with their power feeds and nodes, fabric
domains and node types."""

from django.contrib import admin
from django.core.exceptions import PermissionDenied, ValidationError
from django.forms.models import BaseInlineFormSet
from django.urls import reverse
from django.utils.html import format_html

from core.admin import AtScaleAdmin, AuditedModelAdmin

from ..models import (
    FabricDomain,
    Hall,
    Node,
    NodeType,
    PowerFeed,
    Rack,
    Site,
    feed_removal_errors,
)
from .inventory_files import InventoryFileAdmin


class HallChoicesFilter(admin.RelatedFieldListFilter):
    """A hall filter whose choices ("site/hall") are read in one query, not one per hall."""

    def field_choices(self, field, request, model_admin):
        return [(h.pk, str(h)) for h in Hall.objects.select_related("site").order_by("site__name", "name")]


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
    max_rows, paged_by = 50, "hall"  # core.admin.AtScaleAdmin: a hall holds thousands of racks
    verbose_name_plural = "racks (the first 50 by row and column; the rack list filters by hall)"


@admin.register(Hall)
class HallAdmin(AuditedModelAdmin, AtScaleAdmin):
    list_display = ("name", "site", "it_power_budget_kw", "pue")  # the design PUE the planner models
    list_filter = ("site",)
    search_fields = ("name",)
    index_search = {"hall_name": "pk"}
    list_select_related = ("site",)
    inlines = [RackInline]


class PowerFeedFormSet(BaseInlineFormSet):
    """Each changed feed is checked by PowerFeed.clean(); removing feeds is checked here, against
    what the rack keeps (fleet.models.feed_removal_errors)."""

    def clean(self):
        super().clean()
        if any(self.errors) or not self.instance.pk:
            return
        removed = [f for f in self.forms if f.instance.pk and self.can_delete and self._should_delete_form(f)]
        if not removed:
            return
        kept = [f.instance for f in self.forms if f not in removed and (f.instance.pk or f.has_changed())]
        errors = feed_removal_errors(self.instance, kept)
        if errors:
            raise ValidationError(errors)


class PowerFeedInline(admin.TabularInline):
    model = PowerFeed
    formset = PowerFeedFormSet
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
class RackAdmin(InventoryFileAdmin, AtScaleAdmin):
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
    list_filter = ("hall__site", ("hall", HallChoicesFilter), "row", "cooling")
    search_fields = ("name",)
    search_help_text = "Exact or first characters of a rack or hall name."
    index_search = {"rack_name": "pk", "hall_name": "hall_id"}
    ordering = ("hall", "row", "column")  # fleet_rack_hall_grid_unique: no join sorted over every rack
    list_select_related = ("hall", "hall__site")
    inlines = [NodeInRackInline, PowerFeedInline]

    @admin.display(description="nodes")
    def nodes_link(self, rack):
        return format_html('<a href="{}?rack={}">nodes</a>', reverse("admin:fleet_node_changelist"), rack.pk)

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        if db_field.name == "hall":  # each choice reads "site/hall": one query, not one per hall
            kwargs["queryset"] = Hall.objects.select_related("site")
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

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
class FabricDomainAdmin(AuditedModelAdmin, AtScaleAdmin):
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

    # A type in use (nodes, allocations, price-book entries) keeps its slug and sizing
    # (NodeType.clean) and is not deleted: the SKU would vanish from under its prices.
    def has_delete_permission(self, request, obj=None):
        return super().has_delete_permission(request, obj) and (obj is None or not obj.in_use())

    def delete_queryset(self, request, queryset):
        for node_type in queryset:
            users = node_type.users()
            if users:
                used = ", ".join(f"{n} {label}" for label, n in users.items())
                raise PermissionDenied(f"Nothing deleted: {used} use type {node_type.slug}.")
        super().delete_queryset(request, queryset)


# ---- nodes and their hardware ---------------------------------------------------------------
