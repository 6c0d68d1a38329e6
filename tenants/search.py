"""Tenancy's identifiers in the console search (core.search): tenant slug and name, allocation id."""

from django.db.models import Count, Q
from django.urls import reverse

from core.search import Described, Kind, register

from .choices import AllocationState
from .models import Allocation, Tenant


def describe_tenants(ids: list[str]) -> dict[str, Described]:
    rows = Tenant.objects.filter(pk__in=ids).values("pk", "slug", "name")
    return {
        str(r["pk"]): Described(
            f"{r['name']} ({r['slug']})", reverse("admin:tenants_tenant_change", args=[r["pk"]]), "tenant"
        )
        for r in rows
    }


def describe_allocations(ids: list[str]) -> dict[str, Described]:
    rows = (
        Allocation.objects.filter(pk__in=ids)
        .values("pk", "name", "state", "tenant__slug", "node_count")
        .annotate(live_nodes=Count("memberships", filter=Q(memberships__ended_at__isnull=True)))
    )
    return {
        str(r["pk"]): Described(
            f"allocation {r['name']} ({r['tenant__slug']})",
            reverse("admin:tenants_allocation_change", args=[r["pk"]]),
            f"{AllocationState(r['state']).label} · {r['live_nodes']} of {r['node_count']} node(s) placed",
        )
        for r in rows
    }


register(
    Tenant,
    kinds=[Kind("tenant_slug", "Tenant slug", "slug"), Kind("tenant_name", "Tenant name", "name")],
    describe=describe_tenants,
)
register(Allocation, kinds=[Kind("allocation_id", "Allocation id", "pk")], describe=describe_allocations)
