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

from django.db import IntegrityError, connection, transaction
from django.db.models import Count, Exists, F, OuterRef, Q, Window
from django.utils import timezone

from core.errors import Conflict
from fleet.choices import AgentAction, Health, Lifecycle
from fleet.models import Node, NodeType
from fleet.services.agent_work import request_agent_actions
from fleet.services.lifecycle import transition_many
from tenants.choices import AllocationNodeRole, FabricMode
from tenants.models import Allocation, AllocationNode
from tenants.services.partitions import partition_for_allocation

PLACEABLE_HEALTH = (Health.HEALTHY, Health.DEGRADED)


class InsufficientCapacity(Conflict):
    """No single fabric domain can hold the allocation now."""

    code = "insufficient_capacity"


def placeable_nodes(*, instance_type: NodeType | None = None):
    """Nodes a new allocation may use now."""
    unwiped = AllocationNode.objects.filter(node=OuterRef("pk"), ended_at__isnull=False, wiped_at__isnull=True)
    qs = Node.objects.filter(
        lifecycle=Lifecycle.AVAILABLE, cordoned=False, health__in=PLACEABLE_HEALTH, fabric_domain__isnull=False
    ).exclude(Exists(unwiped))
    if instance_type is not None:
        qs = qs.filter(node_type=instance_type)
    return qs


def free_by_domain(*, instance_type: NodeType) -> dict:
    """fabric domain id → placeable node count (one grouped query)."""
    rows = placeable_nodes(instance_type=instance_type).values("fabric_domain").annotate(n=Count("id"))
    return {r["fabric_domain"]: r["n"] for r in rows}


def domain_can_hold(*, instance_type: NodeType, node_count: int, fabric_domain_id=None) -> bool:
    qs = placeable_nodes(instance_type=instance_type)
    if fabric_domain_id is not None:
        return qs.filter(fabric_domain_id=fabric_domain_id).count() >= node_count
    return any(n >= node_count for n in free_by_domain(instance_type=instance_type).values())


# The preference order, as one ORDER BY over the domain's placeable nodes (`c`) with each
# leaf's healthy count (`leaf_healthy`, a window): first the leaves that can hold the whole
# allocation on their healthy nodes, tightest first so big holes stay free; otherwise spread
# over the fullest leaves, every healthy node before any degraded one. Ties by id.
# Parameters: the node count three times, then the healthy state.
_PREFERENCE = (
    "(c.leaf_healthy >= %s) DESC, "
    "CASE WHEN c.leaf_healthy >= %s THEN c.leaf_healthy END, "
    "CASE WHEN c.leaf_healthy >= %s THEN c.leaf_switch END, "
    "(c.health <> %s), "
    "-c.leaf_healthy, c.leaf_switch, c.id"
)


def _claim_in_domain(instance_type: NodeType, domain_id, node_count: int) -> list[Node] | None:
    """Choose and lock `node_count` nodes of one domain in one statement: the placeable nodes
    ranked in SQL (`_PREFERENCE`), `LIMIT node_count`, and on PostgreSQL `FOR UPDATE SKIP
    LOCKED`, so rows a concurrent placement holds are passed over for the next best ones and
    concurrent placements take disjoint nodes. None when the domain cannot hold them now."""
    ranked = (
        placeable_nodes(instance_type=instance_type)
        .filter(fabric_domain_id=domain_id)
        .annotate(leaf_healthy=Window(Count("id", filter=Q(health=Health.HEALTHY)), partition_by=[F("leaf_switch")]))
        .values_list("id", "leaf_switch", "health", "leaf_healthy")
    )
    ranked_sql, ranked_params = ranked.query.sql_with_params()
    table = Node._meta.db_table
    order_params = [node_count, node_count, node_count, Health.HEALTHY]
    lock = " FOR UPDATE OF n SKIP LOCKED" if connection.vendor == "postgresql" else ""
    # The outer WHERE is what PostgreSQL re-checks on a row another transaction changed while
    # we waited: a node that stopped being available or was cordoned is not taken.
    sql = (
        f"WITH c (id, leaf_switch, health, leaf_healthy) AS ({ranked_sql}) "
        f"SELECT n.id, n.hostname, n.lifecycle, n.leaf_switch, n.health, n.node_type_id, n.fabric_domain_id "
        f"FROM {table} n JOIN c ON c.id = n.id "
        f"WHERE n.lifecycle = %s AND NOT n.cordoned ORDER BY {_PREFERENCE} LIMIT %s{lock}"
    )
    nodes = list(Node.objects.raw(sql, [*ranked_params, Lifecycle.AVAILABLE, *order_params, node_count]))
    return nodes if len(nodes) == node_count else None


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
    free = free_by_domain(instance_type=instance_type)
    if fabric_domain_id is not None:
        free = {k: v for k, v in free.items() if k == fabric_domain_id}
    domains = sorted((d for d, n in free.items() if n >= node_count), key=lambda d: (free[d], str(d)))
    for domain_id in domains:
        try:
            with transaction.atomic():
                nodes = _claim_in_domain(instance_type, domain_id, node_count)
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
    raise InsufficientCapacity(f"no fabric domain has {node_count} free {instance_type.slug} node(s)")


def place_allocation(allocation: Allocation, *, actor: str = "system:allocation-loop") -> list[Node]:
    """Place a pending allocation on `node_count` nodes of its instance type in one domain."""
    return claim_nodes(
        allocation=allocation, instance_type=allocation.instance_type, node_count=allocation.node_count, actor=actor
    )
