"""Checks of the live state for isolation violations (compute, fabric, storage)."""

from django.db.models import Count, F

from fleet.choices import Lifecycle
from fleet.models import NodeEvent
from tenants.models import AllocationNode, FabricPartition, Volume


def find_violations() -> list[str]:
    problems: list[str] = []
    # Compute: a node in two live allocations (the partial unique index should make this impossible).
    for row in (
        AllocationNode.objects.filter(ended_at__isnull=True)
        .values("node__hostname")
        .annotate(n=Count("id"))
        .filter(n__gt=1)
    ):
        problems.append(f"node {row['node__hostname']} is in {row['n']} live allocations")
    # Fabric: a partition key shared by two tenants in one domain.
    for row in (
        FabricPartition.objects.values("fabric_domain__name", "partition_key")
        .annotate(n=Count("tenant", distinct=True))
        .filter(n__gt=1)
    ):
        problems.append(
            f"partition key {row['partition_key']:#06x} in {row['fabric_domain__name']} is shared by {row['n']} tenants"
        )
    # Fabric: a node carrying another tenant's partition, or one of another domain.
    for m in (
        AllocationNode.objects.filter(ended_at__isnull=True, fabric_partition__isnull=False)
        .exclude(fabric_partition__tenant=F("allocation__tenant"))
        .values("node__hostname", "allocation__tenant__slug", "fabric_partition__tenant__slug")
    ):
        problems.append(
            f"node {m['node__hostname']} is allocated to {m['allocation__tenant__slug']} but carries "
            f"a partition of {m['fabric_partition__tenant__slug']}"
        )
    for m in (
        AllocationNode.objects.filter(ended_at__isnull=True, fabric_partition__isnull=False)
        .exclude(fabric_partition__fabric_domain=F("node__fabric_domain"))
        .values("node__hostname")
    ):
        problems.append(f"node {m['node__hostname']} carries a partition of another fabric domain")
    # Storage: a volume exported to another tenant's partition.
    for v in (
        Volume.objects.filter(export_partition__isnull=False)
        .exclude(export_partition__tenant=F("tenant"))
        .values("name", "tenant__slug", "export_partition__tenant__slug")
    ):
        problems.append(
            f"volume {v['name']} of {v['tenant__slug']} is exported to a partition of "
            f"{v['export_partition__tenant__slug']}"
        )
    problems += _unwiped_replacements()
    return problems


def _unwiped_replacements() -> list[str]:
    """A live membership whose node's previous membership was another tenant's, with no
    wiping → available move of the node in between."""
    live = list(
        AllocationNode.objects.filter(ended_at__isnull=True).values_list(
            "node_id", "node__hostname", "started_at", "allocation__tenant_id"
        )
    )
    if not live:
        return []
    node_ids = [n for n, *_ in live]
    previous: dict = {}
    for node_id, ended, tenant_id in (
        AllocationNode.objects.filter(node_id__in=node_ids, ended_at__isnull=False)
        .order_by("node_id", "ended_at")
        .values_list("node_id", "ended_at", "allocation__tenant_id")
    ):
        previous[node_id] = (ended, tenant_id)  # ordered: the last one wins
    wipes: dict = {}
    for node_id, at in NodeEvent.objects.filter(
        node_id__in=list(previous), from_state=Lifecycle.WIPING, to_state=Lifecycle.AVAILABLE
    ).values_list("node_id", "at"):
        wipes.setdefault(node_id, []).append(at)
    problems = []
    for node_id, hostname, started, tenant_id in live:
        if node_id not in previous:
            continue
        ended, prev_tenant = previous[node_id]
        if prev_tenant != tenant_id and not any(ended <= at <= started for at in wipes.get(node_id, [])):
            problems.append(f"node {hostname} was placed for a new tenant without a wipe since the previous one")
    return problems
