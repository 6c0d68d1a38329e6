"""Tenant admin. Tenants and memberships are edited here (audited); allocations are read-only,
because their state moves only through tenants.services.allocations."""

from django.contrib import admin
from django.db.models import Q

from core.admin import AtScaleAdmin, AuditedModelAdmin, ReadOnlyAdmin

from .models import Allocation, AllocationNode, Membership, Quota, StorageQuota, Tenant


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    raw_id_fields = ("user",)


class QuotaInline(admin.TabularInline):
    model = Quota
    extra = 0


class StorageQuotaInline(admin.StackedInline):
    model = StorageQuota
    extra = 0
    max_num = 1


@admin.register(Tenant)
class TenantAdmin(AuditedModelAdmin, AtScaleAdmin):
    list_display = ("slug", "name", "created_at")
    search_fields = ("slug",)
    search_help_text = "Exact or first characters of a tenant's slug or name."
    index_search = {"tenant_slug": "pk", "tenant_name": "pk"}
    inlines = [MembershipInline, QuotaInline, StorageQuotaInline]
    fieldsets = (
        (None, {"fields": ("slug", "name")}),
        (
            "Billing profile (printed on invoices)",
            {"fields": ("legal_name", "billing_address", "tax_id", "tax_rate_percent", "payment_terms_days")},
        ),
    )


class AllocationNodeInline(admin.TabularInline):
    model = AllocationNode
    fields = ("node", "role", "started_at", "ended_at", "end_reason", "wiped_at")
    readonly_fields = fields
    extra = 0
    max_num = 0
    can_delete = False
    show_change_link = False

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("node")


@admin.register(Allocation)
class AllocationAdmin(ReadOnlyAdmin, AtScaleAdmin):
    list_display = ("name", "tenant", "instance_type", "node_count", "state", "degraded", "fabric_domain", "created_at")
    list_filter = ("state", "degraded", "instance_type")
    search_fields = ("name",)
    search_help_text = (
        "Exact or first characters of an allocation id, a tenant's slug or name, or a hostname it ran on."
    )
    index_search = {
        "allocation_id": "pk",
        "tenant_slug": "tenant_id",
        "tenant_name": "tenant_id",
        # a semi-join on the memberships: an allocation that ran on the node twice is listed once, without DISTINCT
        "hostname": lambda ids: Q(pk__in=AllocationNode.objects.filter(node_id__in=ids).values("allocation_id")),
    }
    list_select_related = ("tenant", "instance_type", "fabric_domain")
    inlines = [AllocationNodeInline]
