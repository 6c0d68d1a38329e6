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

A placement whose first try succeeds is eight statements with its savepoint (pinned in
tests/tenants/test_placement_writes.py): one chooses the domain (the tightest that fits),
ranks and locks its nodes and brings the tenant's partition along; then one INSERT each of
memberships, node events (in transition_many, after its compare-and-set UPDATE … RETURNING)
and agent actions, and the allocation's UPDATE. Only when that domain cannot be taken are the
domains counted and tried in turn; a tenant's first isolated allocation in a domain also
creates its partition.

What keeps the choosing statement cheap as the fleet grows: every free node of the type is
counted per domain to find the tightest, ~20,000 at 125,000 nodes (80 % used). The free-nodes
index (`fleet_node_free_by_type_idx`) holds every column that count and the ranking read, so
both are index-only scans; the count is a plain grouped scan in domain order, and the few free
nodes with an unwiped membership are found from their own partial index and subtracted
(`_tightest_domain`); the partition is joined to the locked rows only. No counter is kept
anywhere, so nothing that moves, cordons or grades a node has to keep one right.
"""

import functools

from django.db import IntegrityError, connection, router, transaction
from django.db.models import Count, Exists, F, OuterRef, Q, Window
from django.db.models.expressions import RawSQL

from core import clock
from core.bulk import insert_values, update_returning
from core.errors import Conflict
from fleet.choices import AgentAction, Health, Lifecycle
from fleet.models import Node, NodeType
from fleet.selectors import on_golden_baseline
from fleet.services.agent_work import request_agent_actions
from fleet.services.lifecycle import transition_many
from tenants.choices import AllocationNodeRole, FabricMode
from tenants.models import Allocation, AllocationNode, FabricPartition, Tenant
from tenants.services.access import current_access
from tenants.services.partitions import partition_for_allocation

PLACEABLE_HEALTH = (Health.HEALTHY, Health.DEGRADED)
# What the claim reads of a node (the rest is deferred), in the model's field order as from_db
# wants it, and the whole of the tenant's partition that comes along.
_NODE_FIELDS = tuple(
    f
    for f in Node._meta.concrete_fields
    if f.attname in {"id", "hostname", "lifecycle", "leaf_switch", "health", "node_type_id", "fabric_domain_id"}
)
_PARTITION_FIELDS = tuple(FabricPartition._meta.concrete_fields)


class InsufficientCapacity(Conflict):
    """No single fabric domain can hold the allocation now."""

    code = "insufficient_capacity"


def placeable_nodes(*, instance_type: NodeType | None = None, on_baseline_only: bool = False):
    """Nodes a new allocation may use now; `on_baseline_only` (a tenant's `require_baseline`)
    keeps only nodes running their type's golden baseline."""
    unwiped = _unwiped_memberships().filter(node=OuterRef("pk"))
    return _free_nodes(instance_type, on_baseline_only).exclude(Exists(unwiped))


def _unwiped_memberships():
    """Memberships of nodes that left a tenant and were not seen wiped since: such a node is
    never placed (a partial index holds just these rows, normally none)."""
    return AllocationNode.objects.filter(ended_at__isnull=False, wiped_at__isnull=True)


def _free_nodes(instance_type: NodeType | None, on_baseline_only: bool):
    """`placeable_nodes` before the unwiped nodes are taken out."""
    qs = Node.objects.filter(
        lifecycle=Lifecycle.AVAILABLE, cordoned=False, health__in=PLACEABLE_HEALTH, fabric_domain__isnull=False
    )
    if instance_type is not None:
        qs = qs.filter(node_type=instance_type)
        if on_baseline_only:
            qs = on_golden_baseline(qs, instance_type)
    return qs


def _tightest_domain(instance_type: NodeType, node_count: int, on_baseline_only: bool) -> RawSQL:
    """The tightest domain that can hold `node_count` (fewest placeable nodes, ties by id), as a
    scalar subquery. Each domain's placeable count is its free count less its free nodes that
    are not yet wiped, two grouped counts joined: the free count is an index-only scan of the
    free-nodes index (~20,000 entries at 125,000 nodes, 80 % used) with nothing probed per
    entry, and the unwiped ones are found from their own partial index, normally empty. The
    same figure as counting `placeable_nodes` per domain, whose anti-join probed once per free
    node: ~2 ms of a ~5 ms count at 125,000 nodes."""
    free = _free_nodes(instance_type, on_baseline_only).order_by()
    counted = free.values("fabric_domain_id").annotate(n=Count("id"))
    held = counted.filter(pk__in=_unwiped_memberships().values("node_id"))
    free_sql, free_params = counted.query.sql_with_params()
    held_sql, held_params = held.query.sql_with_params()
    placeable = "f.n - COALESCE(h.n, 0)"
    sql = (
        f"SELECT f.fabric_domain_id FROM ({free_sql}) f LEFT JOIN ({held_sql}) h "
        f"ON h.fabric_domain_id = f.fabric_domain_id WHERE {placeable} >= %s "
        f"ORDER BY {placeable}, f.fabric_domain_id LIMIT 1"
    )
    return RawSQL(
        sql, (*free_params, *held_params, node_count), output_field=Node._meta.get_field("fabric_domain").target_field
    )


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


def _claim_statement(
    instance_type: NodeType, node_count: int, domain_id, on_baseline_only: bool
) -> tuple[str, tuple, tuple]:
    """The SQL that chooses and locks the nodes (see `_claim`), and its parameters before and
    after the tenant's."""
    placeable = placeable_nodes(instance_type=instance_type, on_baseline_only=on_baseline_only)
    if domain_id is None:
        # The tightest domain that can hold them all (fewest placeable nodes, ties by id): what the
        # fallback loop of claim_nodes tries first, chosen in the same statement.
        domain_id = _tightest_domain(instance_type, node_count, on_baseline_only)
    ranked = (
        placeable.filter(fabric_domain_id=domain_id)
        .annotate(leaf_healthy=Window(Count("id", filter=Q(health=Health.HEALTHY)), partition_by=[F("leaf_switch")]))
        .values_list("id", "leaf_switch", "health", "leaf_healthy")
        .order_by()  # the outer query orders; a sort inside the CTE would be wasted
    )
    ranked_sql, ranked_params = ranked.query.sql_with_params()
    quote = connection.ops.quote_name
    order_params = [node_count, node_count, node_count, Health.HEALTHY]
    if connection.vendor == "postgresql":
        # `n` is fetched by primary key from the CTE's ids (an InitPlan): a plain join has the
        # planner hash-join against every available node (at 12,500 nodes, 80 % used: ~8 ms
        # against ~1 ms on a loaded 2-core machine).
        only_ranked = "n.id = ANY(ARRAY(SELECT c.id FROM c)) AND "
        lock = " FOR UPDATE OF n SKIP LOCKED"
    else:
        only_ranked, lock = "", ""
    node_columns = ", ".join(f"n.{quote(f.column)}" for f in _NODE_FIELDS)
    columns = ", ".join(
        [*(f"t.{quote(f.column)}" for f in _NODE_FIELDS), *(f"p.{quote(f.column)}" for f in _PARTITION_FIELDS)]
    )
    # The chosen rows (`t`) are ranked, limited and locked first; the outer WHERE is what
    # PostgreSQL re-checks on a row another transaction changed while we waited: a node that
    # stopped being available or was cordoned is not taken. Then the tenant's partition in their
    # domain comes along (LEFT JOIN, not locked): an isolated allocation needs it, and a
    # statement of its own cost more than the join. Joined after the LIMIT, it is looked up for
    # the `node_count` chosen rows, not for every candidate of the domain (one domain's
    # partitions of this tenant read per candidate: ~50 × 500 rows at 125,000 nodes).
    sql = (
        f"WITH c (id, leaf_switch, health, leaf_healthy) AS ({ranked_sql}), "
        f"t AS (SELECT {node_columns} FROM {quote(Node._meta.db_table)} n JOIN c ON c.id = n.id "
        f"WHERE {only_ranked}n.lifecycle = %s AND NOT n.cordoned ORDER BY {_PREFERENCE} LIMIT %s{lock}) "
        f"SELECT {columns} FROM t LEFT JOIN {quote(FabricPartition._meta.db_table)} p "
        f"ON p.{quote('fabric_domain_id')} = t.{quote('fabric_domain_id')} AND p.{quote('tenant_id')} = %s"
    )
    # Parameters before the tenant's, and after it: the statement is cached for every tenant.
    return sql, (*ranked_params, Lifecycle.AVAILABLE, *order_params, node_count), ()


@functools.lru_cache(maxsize=1024)
def _cached_claim_statement(
    vendor: str, instance_type: NodeType, node_count: int, domain_id
) -> tuple[str, tuple, tuple]:
    """`_claim_statement` without the golden-baseline filter. It depends only on these arguments
    and the schema, so it is built once per process: composing it through the ORM costs more
    Python than the database spends running it. (Never cached with the baseline filter, which
    reads the type's current golden baseline.)"""
    return _claim_statement(instance_type, node_count, domain_id, False)


def _claim(
    instance_type: NodeType, node_count: int, tenant_id, domain_id=None, on_baseline_only: bool = False
) -> tuple[list[Node], FabricPartition | None] | None:
    """Choose and lock `node_count` nodes of one domain in one statement: the placeable nodes
    ranked in SQL (`_PREFERENCE`), `LIMIT node_count`, and on PostgreSQL `FOR UPDATE SKIP
    LOCKED`, so rows a concurrent placement holds are passed over for the next best ones and
    concurrent placements take disjoint nodes. `domain_id` None: the tightest domain that can
    hold them, chosen in the same statement. The nodes come with the tenant's partition in their
    domain, if it has one. None when the domain cannot hold them now."""
    if on_baseline_only:
        sql, head, tail = _claim_statement(instance_type, node_count, domain_id, True)
    else:
        sql, head, tail = _cached_claim_statement(connection.vendor, instance_type, node_count, domain_id)
    with connection.cursor() as cursor:
        cursor.execute(sql, (*head, Tenant._meta.pk.get_db_prep_value(tenant_id, connection), *tail))
        rows = cursor.fetchall()
    if len(rows) != node_count:
        return None
    split = len(_NODE_FIELDS)
    first = rows[0][split:]  # one domain, so one partition (or none yet)
    partition = _from_rows(FabricPartition, _PARTITION_FIELDS, [first])[0] if first[0] is not None else None
    return _from_rows(Node, _NODE_FIELDS, [row[:split] for row in rows]), partition


def _from_rows(model, fields, rows) -> list:
    """Model instances from rows of raw SQL, each value through its field's converters (what
    the ORM applies: e.g. SQLite returns UUIDs and datetimes as text; PostgreSQL needs none
    here), the other fields deferred."""
    alias = connection.alias  # the proxy costs a lookup per access: once, not per value
    converters = _converters(model, fields, connection.vendor)
    names = [f.attname for f in fields]
    if not any(c for _, c in converters):
        return [model.from_db(alias, names, row) for row in rows]
    instances = []
    for row in rows:
        values = []
        for value, (col, field_converters) in zip(row, converters, strict=True):
            for converter in field_converters:
                value = converter(value, col, connection)
            values.append(value)
        instances.append(model.from_db(alias, names, values))
    return instances


@functools.cache
def _converters(model, fields: tuple, vendor: str) -> tuple:
    columns = [f.get_col(model._meta.db_table) for f in fields]
    return tuple(
        (col, (*connection.ops.get_db_converters(col), *f.get_db_converters(connection)))
        for f, col in zip(fields, columns, strict=True)
    )


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
    each domain is tried in its own transaction (a savepoint inside a caller's).

    The first try is one statement that chooses the domain and its nodes (`_claim`). Only if
    that domain came up short (a concurrent placement holds some of its nodes) or none fits
    does it count every domain's free nodes and try each that fits, tightest first."""
    on_baseline_only = allocation.tenant.require_baseline
    placed = _claim_and_write(allocation, instance_type, node_count, actor, role, fabric_domain_id, on_baseline_only)
    if placed is not None:
        return placed
    if fabric_domain_id is None:
        free = free_by_domain(instance_type=instance_type, on_baseline_only=on_baseline_only)
        domains = sorted((d for d, n in free.items() if n >= node_count), key=lambda d: (free[d], str(d)))
        for domain_id in domains:
            placed = _claim_and_write(allocation, instance_type, node_count, actor, role, domain_id, on_baseline_only)
            if placed is not None:
                return placed
    on = " on the golden software baseline (the tenant requires it)" if on_baseline_only else ""
    raise InsufficientCapacity(f"no fabric domain has {node_count} free {instance_type.slug} node(s){on}")


def _claim_and_write(
    allocation: Allocation,
    instance_type: NodeType,
    node_count: int,
    actor: str,
    role: str,
    domain_id,
    on_baseline_only: bool,
) -> list[Node] | None:
    """One try in one domain (`domain_id` None: the one `_claim` chooses), in its own savepoint:
    the nodes, or None if it cannot hold them now or lost a race for one of them."""
    try:
        with transaction.atomic():
            claimed = _claim(instance_type, node_count, allocation.tenant_id, domain_id, on_baseline_only)
            if claimed is None:
                return None
            nodes, existing = claimed
            domain_id = nodes[0].fabric_domain_id
            partition = None
            if allocation.fabric == FabricMode.ISOLATED:
                # The tenant's first isolated allocation in this domain creates its partition.
                partition = existing or partition_for_allocation(
                    tenant=allocation.tenant, fabric_domain_id=domain_id, actor=actor
                )
            # The partial unique index refuses a node already in a live allocation (IntegrityError).
            insert_values(
                AllocationNode,
                [{"node_id": n.pk} for n in nodes],
                using=router.db_for_write(AllocationNode),
                shared={
                    "allocation_id": allocation.pk,
                    "role": role,
                    "started_at": clock.now(),
                    "fabric_partition_id": partition.pk if partition else None,
                },
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
                # who logs in with which public keys, on which image, with which volumes: the
                # agent reports ready only once it checked all of it (tenants.services.access)
                "access": current_access(allocation),
            }
            request_agent_actions(
                nodes=nodes,
                action=AgentAction.PROVISION,
                actor=actor,
                params=params,
                reason=f"allocation {allocation.pk}",
            )
            if role == AllocationNodeRole.ORIGINAL:
                update_returning(
                    Allocation,
                    [allocation.pk],
                    values={"fabric_domain_id": domain_id, "fabric_partition_id": partition.pk if partition else None},
                    using=router.db_for_write(Allocation),
                )
                allocation.fabric_domain_id = domain_id
                allocation.fabric_partition = partition
            return nodes
    except IntegrityError:
        return None  # lost a race for a node in this domain; the next domain may still fit


def place_allocation(allocation: Allocation, *, actor: str = "system:allocation-loop") -> list[Node]:
    """Place a pending allocation on `node_count` nodes of its instance type in one domain. An
    isolated allocation mounting a volume exported to a partition goes only to that partition's
    domain (there it gets that partition: a tenant has one per domain), so its nodes can reach
    the volume (tenants.services.volumes.check_export_partitions keeps the volumes in one)."""
    domain_id = None
    if allocation.fabric == FabricMode.ISOLATED:
        domain_id = (
            FabricPartition.objects.filter(volumes__allocations=allocation)
            .values_list("fabric_domain_id", flat=True)
            .first()
        )
    try:
        return claim_nodes(
            allocation=allocation,
            instance_type=allocation.instance_type,
            node_count=allocation.node_count,
            actor=actor,
            fabric_domain_id=domain_id,
        )
    except InsufficientCapacity as short:
        if domain_id is None:
            raise
        raise InsufficientCapacity(
            f"{short.detail}; its volumes are exported to a partition of one fabric domain, so it waits for "
            "free nodes there"
        ) from None
