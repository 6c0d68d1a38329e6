"""Reads for the tenant API and portal (every query is scoped to one tenant)."""

from dataclasses import dataclass
from decimal import Decimal

from django.core.cache import cache
from django.db.models import Count, Prefetch, Sum

from fleet.models import NodeType, SoftwareBaseline
from tenants.choices import TERMINAL_ALLOCATION_STATES
from tenants.models import (
    Allocation,
    AllocationNode,
    FabricPartition,
    Quota,
    SshKey,
    Tenant,
    Volume,
)
from tenants.services.access import LIVE_STATES, access_spec, live_allocations_following
from tenants.services.placement import placeable_nodes

DEFAULT_CURRENCY = "USD"  # shown for a SKU the price book does not list


@dataclass(frozen=True)
class InstanceType:
    name: str
    gpu_model: str
    generation: str
    gpus_per_node: int
    fabric: str
    price_per_gpu_hour: Decimal | None
    currency: str
    available_nodes: int


def _fabric_family(fabric: str) -> str:
    """`ib-ndr-400g` → `ib-ndr` (docs/api.md names fabrics by family)."""
    parts = fabric.split("-")
    return "-".join(parts[:2]) if fabric.startswith("ib-") and len(parts) > 2 else fabric


def instance_types(prices: dict) -> list[InstanceType]:
    """What can be rented now. ``prices`` is sku → today's price (billing.selectors.current_prices):
    prices are billing's, which sits above tenancy, so the caller passes them in."""
    available = dict(placeable_nodes().values_list("node_type").annotate(n=Count("id")))
    rows = []
    for nt in NodeType.objects.order_by("slug"):
        price = prices.get(nt.slug)
        rows.append(
            InstanceType(
                name=nt.slug,
                gpu_model=nt.gpu_model,
                generation=nt.generation,
                gpus_per_node=nt.gpus_per_node,
                fabric=_fabric_family(nt.fabric),
                price_per_gpu_hour=price.unit_price.quantize(Decimal("0.01")) if price else None,
                currency=price.currency if price else DEFAULT_CURRENCY,
                available_nodes=available.get(nt.pk, 0),
            )
        )
    return rows


def allocations_for(tenant: Tenant):
    live = (
        AllocationNode.objects.filter(ended_at__isnull=True)
        .select_related("node__node_type")
        .order_by("node__hostname")
    )
    replaced = (
        AllocationNode.objects.filter(end_reason__startswith="replaced")
        .select_related("node")
        .order_by("ended_at", "id")
    )
    return (
        Allocation.objects.filter(tenant=tenant)
        .select_related("instance_type")
        .prefetch_related(
            Prefetch("memberships", queryset=live, to_attr="live_members"),
            Prefetch("memberships", queryset=replaced, to_attr="replaced_members"),
            "volumes",
            "ssh_keys",
        )
    )


def ssh_keys_for(tenant: Tenant):
    return SshKey.objects.filter(tenant=tenant)


def live_allocations_with_key(key: SshKey) -> list[Allocation]:
    """The live allocations whose nodes carry `key` (what deleting it touches)."""
    return live_allocations_following(key.tenant, key)


@dataclass(frozen=True)
class Image:
    id: str
    name: str
    instance_type: str
    versions: dict


def images() -> list[Image]:
    """What a tenant may run: each node type's golden software baseline (OS, driver, CUDA, NCCL,
    container runtime), named after the type. One query."""
    return [
        Image(id=str(b.pk), name=f"{b.node_type.slug} {b.name}", instance_type=b.node_type.slug, versions=b.versions)
        for b in SoftwareBaseline.objects.filter(golden=True).select_related("node_type").order_by("node_type__slug")
    ]


ACCESS_CACHE_SECONDS = 3600


def node_access(allocation_id, *, state: str | None = None, revision: str | None = None) -> dict | None:
    """The access spec (tenants.services.access) of the allocation a node serves, for its
    agent's desired-state; None when there is none.

    Every allocated node's agent polls every 10 s: desired-state passes the allocation's state
    and stored revision it read with the node (billing.selectors.agent_node_state), and the spec
    comes from the cache under that revision (every change of keys, volumes or image stores a
    new revision first, so a cached spec is never stale): no query at all on a hit. Without the
    cache (Redis away) it is built from the database."""
    if state is None or revision is None:  # the caller did not read them with the node
        state, revision = Allocation.objects.filter(pk=allocation_id).values_list(
            "state", "access_revision"
        ).first() or (None, None)
    if state not in LIVE_STATES:
        return None
    key = f"tenants:access:{allocation_id}:{revision}"
    try:
        spec = cache.get(key)
    except Exception:  # the cache is an optimisation; desired-state must not fail with it
        spec = None
    if spec is None:
        allocation = Allocation.objects.select_related("image").filter(pk=allocation_id).first()
        if allocation is None:
            return None
        spec = access_spec(allocation)
        if spec["revision"] == revision:
            try:
                cache.set(key, spec, ACCESS_CACHE_SECONDS)
            except Exception:
                pass
    return spec


def partitions_for(tenant: Tenant):
    return FabricPartition.objects.filter(tenant=tenant).select_related("fabric_domain")


def volumes_for(tenant: Tenant):
    return Volume.objects.filter(tenant=tenant).select_related("export_partition")


def quota_and_usage(tenant: Tenant) -> tuple[dict, dict]:
    quota = dict(Quota.objects.filter(tenant=tenant).values_list("generation", "max_nodes"))
    usage = {gen: 0 for gen in quota}
    for row in (
        Allocation.objects.filter(tenant=tenant)
        .exclude(state__in=TERMINAL_ALLOCATION_STATES)
        .values("instance_type__generation")
        .annotate(n=Sum("node_count"))
    ):
        usage[row["instance_type__generation"]] = row["n"]
    return quota, usage


def tenants_with_usage() -> list[dict]:
    """Operator page: every tenant with live allocations and nodes held now."""
    held = {
        row["tenant"]: row
        for row in (
            Allocation.objects.exclude(state__in=TERMINAL_ALLOCATION_STATES)
            .values("tenant")
            .annotate(allocations=Count("id"), nodes=Sum("node_count"))
        )
    }
    return [
        {
            "tenant": t,
            "allocations": held.get(t.pk, {}).get("allocations", 0),
            "nodes": held.get(t.pk, {}).get("nodes", 0),
        }
        for t in Tenant.objects.order_by("slug")
    ]


def live_allocation_ids(node_ids) -> dict:
    """node id → id of the allocation it is in now (one query)."""
    return dict(
        AllocationNode.objects.filter(node_id__in=list(node_ids), ended_at__isnull=True).values_list(
            "node_id", "allocation_id"
        )
    )


def live_allocation_of_node(node) -> tuple | None:
    """(allocation id, tenant id) of the allocation the node is in now, or None."""
    return (
        AllocationNode.objects.filter(node=node, ended_at__isnull=True)
        .values_list("allocation_id", "allocation__tenant_id")
        .first()
    )
