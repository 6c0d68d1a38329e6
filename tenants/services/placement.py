"""Placing an allocation on whole nodes.

Rules (docs/api.md): every node of one allocation has the same instance type (hence generation)
and sits in one fabric domain; only uncordoned, `available`, healthy nodes are used, degraded
ones last; nodes that left a tenant and were not seen wiped since are never used. Within a
domain the nodes under the fewest leaf switches win (one leaf if one can hold them all, the
tightest such leaf so big holes stay free).

Concurrency is settled by the database: candidate rows are locked with
`SELECT ... FOR UPDATE SKIP LOCKED` (PostgreSQL), so concurrent placements take disjoint
nodes; the partial unique index on AllocationNode forbids a node in two live allocations
whatever happens; and the lifecycle compare-and-set refuses a node that moved.
"""

from collections import defaultdict

from django.db import IntegrityError, connection, transaction
from django.db.models import Count, Exists, OuterRef
from django.utils import timezone

from core.errors import Conflict
from fleet.choices import AgentAction, Health, Lifecycle
from fleet.models import Node, NodeType
from fleet.selectors import on_golden_baseline
from fleet.services.agent_work import request_agent_actions
from fleet.services.lifecycle import transition_many
from tenants.choices import AllocationNodeRole, FabricMode
from tenants.models import Allocation, AllocationNode
from tenants.services.partitions import partition_for_allocation

PLACEABLE_HEALTH = (Health.HEALTHY, Health.DEGRADED)


class InsufficientCapacity(Conflict):
    """No single fabric domain can hold the allocation now."""

    code = "insufficient_capacity"


def placeable_nodes(*, instance_type: NodeType | None = None, on_baseline_only: bool = False):
    """Nodes a new allocation may use now; `on_baseline_only` (a tenant's `require_baseline`)
    keeps only nodes running their type's golden baseline."""
    unwiped = AllocationNode.objects.filter(node=OuterRef("pk"), ended_at__isnull=False, wiped_at__isnull=True)
    qs = Node.objects.filter(
        lifecycle=Lifecycle.AVAILABLE, cordoned=False, health__in=PLACEABLE_HEALTH, fabric_domain__isnull=False
    ).exclude(Exists(unwiped))
    if instance_type is not None:
        qs = qs.filter(node_type=instance_type)
        if on_baseline_only:
            qs = on_golden_baseline(qs, instance_type)
    return qs


def free_by_domain(*, instance_type: NodeType, on_baseline_only: bool = False) -> dict:
    """fabric domain id → placeable node count (one grouped query)."""
    rows = (
        placeable_nodes(instance_type=instance_type, on_baseline_only=on_baseline_only)
        .values("fabric_domain")
        .annotate(n=Count("id"))
    )
    return {r["fabric_domain"]: r["n"] for r in rows}


def domain_can_hold(*, instance_type: NodeType, node_count: int, fabric_domain_id=None) -> bool:
    qs = placeable_nodes(instance_type=instance_type)
    if fabric_domain_id is not None:
        return qs.filter(fabric_domain_id=fabric_domain_id).count() >= node_count
    return any(n >= node_count for n in free_by_domain(instance_type=instance_type).values())


def choose_nodes(candidates: list[tuple], node_count: int) -> list:
    """Pick `node_count` node ids from (id, leaf_switch, health) rows: healthy before degraded,
    fewest leaf switches, and the tightest single leaf when one can hold them all."""
    by_leaf: dict[str, list] = defaultdict(list)
    for node_id, leaf, health in sorted(candidates, key=lambda r: (r[2] != Health.HEALTHY, str(r[0]))):
        by_leaf[leaf].append((node_id, health))
    healthy_count = {leaf: sum(1 for _, h in rows if h == Health.HEALTHY) for leaf, rows in by_leaf.items()}
    fitting = [leaf for leaf, n in healthy_count.items() if n >= node_count]
    if fitting:
        leaf = min(fitting, key=lambda lf: (healthy_count[lf], lf))
        return [node_id for node_id, _ in by_leaf[leaf][:node_count]]
    # Spread: fullest leaves first so the allocation spans as few as possible; degraded last.
    order = sorted(by_leaf, key=lambda lf: (-healthy_count[lf], lf))
    healthy = [nid for lf in order for nid, h in by_leaf[lf] if h == Health.HEALTHY]
    degraded = [nid for lf in order for nid, h in by_leaf[lf] if h != Health.HEALTHY]
    return (healthy + degraded)[:node_count]


def _lock(ids: list):
    """Lock the still-available rows among `ids`, skipping rows another placement holds."""
    qs = Node.objects.filter(pk__in=ids, lifecycle=Lifecycle.AVAILABLE, cordoned=False)
    if connection.vendor == "postgresql":
        qs = qs.select_for_update(skip_locked=True, of=("self",))
    return list(qs.only("id", "hostname", "lifecycle", "leaf_switch", "health", "node_type_id", "fabric_domain_id"))


def _claim_in_domain(
    instance_type: NodeType, domain_id, node_count: int, on_baseline_only: bool = False
) -> list[Node] | None:
    candidates = list(
        placeable_nodes(instance_type=instance_type, on_baseline_only=on_baseline_only)
        .filter(fabric_domain_id=domain_id)
        .values_list("id", "leaf_switch", "health")
    )
    if len(candidates) < node_count:
        return None
    locked = _lock(choose_nodes(candidates, node_count))
    if len(locked) < node_count:
        # A concurrent placement holds some of ours: top up from the rest of the domain in
        # preference order, locking only as many rows at a time as are still missing so we
        # never hold nodes we will not use.
        tried = {n.pk for n in locked} | set(choose_nodes(candidates, node_count))
        rest = [nid for nid in choose_nodes(candidates, len(candidates)) if nid not in tried]
        while rest and len(locked) < node_count:
            need = node_count - len(locked)
            batch, rest = rest[:need], rest[need:]
            locked += _lock(batch)
    return locked if len(locked) == node_count else None


def claim_nodes(
    *,
    allocation: Allocation,
    instance_type: NodeType,
    node_count: int,
    actor: str,
    role: str = AllocationNodeRole.ORIGINAL,
    fabric_domain_id=None,
) -> list[Node]:
    """Claim `node_count` nodes in one domain for `allocation`: membership rows, nodes
    available→provisioning, `provision` queued. All or nothing (raises InsufficientCapacity):
    each domain is tried in its own transaction (a savepoint inside a caller's)."""
    on_baseline_only = allocation.tenant.require_baseline
    free = free_by_domain(instance_type=instance_type, on_baseline_only=on_baseline_only)
    if fabric_domain_id is not None:
        free = {k: v for k, v in free.items() if k == fabric_domain_id}
    domains = sorted((d for d, n in free.items() if n >= node_count), key=lambda d: (free[d], str(d)))
    for domain_id in domains:
        try:
            with transaction.atomic():
                nodes = _claim_in_domain(instance_type, domain_id, node_count, on_baseline_only)
                if nodes is None:
                    continue
                partition = None
                if allocation.fabric == FabricMode.ISOLATED:
                    partition = partition_for_allocation(
                        tenant=allocation.tenant, fabric_domain_id=domain_id, actor=actor
                    )
                now = timezone.now()
                AllocationNode.objects.bulk_create(
                    [
                        AllocationNode(
                            allocation=allocation, node=n, role=role, started_at=now, fabric_partition=partition
                        )
                        for n in nodes
                    ]
                )
                changes = transition_many(
                    nodes,
                    Lifecycle.PROVISIONING,
                    actor=actor,
                    action="provision",
                    reason=f"placed in allocation {allocation.pk}",
                )
                if len(changes) != node_count:
                    raise IntegrityError("a chosen node moved while being placed")
                params = {
                    "allocation_id": str(allocation.pk),
                    "tenant_id": str(allocation.tenant_id),
                    "partition_key": partition.partition_key if partition else None,
                }
                request_agent_actions(
                    nodes=nodes,
                    action=AgentAction.PROVISION,
                    actor=actor,
                    params=params,
                    reason=f"allocation {allocation.pk}",
                )
                if role == AllocationNodeRole.ORIGINAL:
                    Allocation.objects.filter(pk=allocation.pk).update(
                        fabric_domain_id=domain_id, fabric_partition=partition
                    )
                    allocation.fabric_domain_id = domain_id
                    allocation.fabric_partition = partition
                return nodes
        except IntegrityError:
            continue  # lost a race for a node in this domain; the next domain may still fit
    on = " on the golden software baseline (the tenant requires it)" if on_baseline_only else ""
    raise InsufficientCapacity(f"no fabric domain has {node_count} free {instance_type.slug} node(s){on}")


def place_allocation(allocation: Allocation, *, actor: str = "system:allocation-loop") -> list[Node]:
    """Place a pending allocation on `node_count` nodes of its instance type in one domain."""
    return claim_nodes(
        allocation=allocation, instance_type=allocation.instance_type, node_count=allocation.node_count, actor=actor
    )
