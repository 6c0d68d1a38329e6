"""Reads of the fleet, as aggregate queries (no per-node loops)."""
from dataclasses import dataclass
from decimal import Decimal

from django.db.models import Count, DecimalField, Q, QuerySet, Sum, Value
from django.db.models.functions import Coalesce

from .choices import Lifecycle
from .models import Hall, Node, Rack

ZERO_KW = Value(Decimal("0"), output_field=DecimalField(max_digits=9, decimal_places=2))
HOT_FRACTION = Decimal("0.9")  # a rack at or above this share of its usable kW is highlighted
KW_QUANTUM = Decimal("0.01")


@dataclass(frozen=True)
class RackRow:
    rack: Rack
    hall_name: str
    node_count: int
    rated_kw: Decimal
    usable_kw: Decimal
    planned_kw: Decimal
    by_lifecycle: dict[str, int]

    @property
    def load_fraction(self) -> Decimal:
        return (self.planned_kw / self.usable_kw) if self.usable_kw else Decimal("0")

    @property
    def load_pct(self) -> int:
        return int(min(self.load_fraction, Decimal("1")) * 100)

    @property
    def is_hot(self) -> bool:
        return self.load_fraction >= HOT_FRACTION


def racks_with_power(*, hall_id=None) -> QuerySet:
    """Racks annotated with node counts per lifecycle and the rated kW of what they hold."""
    lifecycle_counts = {
        f"n_{state}": Count("nodes", filter=Q(nodes__lifecycle=state)) for state in Lifecycle.values
    }
    qs = Rack.objects.select_related("hall").annotate(
        node_count=Count("nodes"),
        planned_kw=Coalesce(Sum("nodes__node_type__node_kw"), ZERO_KW),
        **lifecycle_counts,
    )
    if hall_id:
        qs = qs.filter(hall_id=hall_id)
    return qs.order_by("hall__name", "row", "column", "name")


def rack_rows(racks) -> list[RackRow]:
    return [
        RackRow(
            rack=r,
            hall_name=r.hall.name,
            node_count=r.node_count,
            rated_kw=r.rated_power_kw,
            usable_kw=r.usable_kw,
            planned_kw=Decimal(r.planned_kw).quantize(KW_QUANTUM),  # SQLite sums decimals as floats
            by_lifecycle={s: getattr(r, f"n_{s}") for s in Lifecycle.values if getattr(r, f"n_{s}")},
        )
        for r in racks
    ]


def halls_for_filter() -> QuerySet:
    return Hall.objects.select_related("site").order_by("site__name", "name")


def gpu_totals_by_lifecycle_and_generation() -> list[dict]:
    """GPUs per (generation, lifecycle): one grouped query."""
    return list(
        Node.objects.values("node_type__generation", "lifecycle")
        .annotate(gpus=Sum("node_type__gpus_per_node"), nodes=Count("id"))
        .order_by("node_type__generation", "lifecycle")
    )


# --- node lifecycle reads (ops API, console node pages, allocation loop) -------------------

NODE_FILTERS = ("site", "hall", "rack", "generation", "lifecycle", "health", "cordoned")


def nodes_to_drain() -> QuerySet:
    """Nodes an operator asked to drain while they carry a live allocation: the allocation
    loop moves the tenant off before `drain_deadline` and clears the request (uncordon also does)."""
    return Node.objects.filter(drain_requested_at__isnull=False).order_by("drain_deadline")


def node_list(filters: dict) -> QuerySet:
    """Nodes with what a list row shows, filtered by slug/name/id values (already validated)."""
    qs = Node.objects.select_related("rack__hall__site", "node_type", "fabric_domain")
    if filters.get("site"):
        qs = qs.filter(Q(rack__hall__site__slug=filters["site"]))
    if filters.get("hall"):
        qs = qs.filter(rack__hall_id=filters["hall"])
    if filters.get("rack"):
        qs = qs.filter(rack__name=filters["rack"])
    if filters.get("generation"):
        qs = qs.filter(node_type__generation=filters["generation"])
    if filters.get("lifecycle"):
        qs = qs.filter(lifecycle=filters["lifecycle"])
    if filters.get("health"):
        qs = qs.filter(health=filters["health"])
    if filters.get("cordoned") is not None:
        qs = qs.filter(cordoned=filters["cordoned"])
    return qs


def live_allocation_ids(node_ids) -> dict:
    """node id → id of the allocation it is in now (one query)."""
    from tenants.models import AllocationNode

    return dict(AllocationNode.objects.filter(node_id__in=list(node_ids), ended_at__isnull=True)
                .values_list("node_id", "allocation_id"))


def drives_for_nodes(node_ids) -> dict:
    """node id → [{id, serial, sanitized}] (two queries at most). Sanitisation records belong to
    the disposition feature; until it provides `sanitized_drive_ids`, no drive counts as sanitised."""
    from .models import Drive

    rows = list(Drive.objects.filter(node_id__in=list(node_ids)).order_by("serial").values_list("id", "node_id", "serial"))
    sanitized_ids: set = set()
    lookup = globals().get("sanitized_drive_ids")
    if lookup is not None and rows:
        sanitized_ids = set(lookup([r[0] for r in rows]))
    out: dict = {}
    for drive_id, node_id, serial in rows:
        out.setdefault(node_id, []).append({"id": str(drive_id), "serial": serial, "sanitized": drive_id in sanitized_ids})
    return out


def conditions_for_nodes(node_ids) -> dict:
    """node id → its open health conditions, from the health app when it provides them."""
    try:
        from health.selectors import conditions_for_nodes as health_conditions
    except ImportError:  # the health app has not landed its conditions yet
        return {}
    return health_conditions(list(node_ids))


def pending_agent_actions(node) -> QuerySet:
    from .choices import AgentActionState
    from .models import NodeAgentAction

    return NodeAgentAction.objects.filter(node=node, state=AgentActionState.PENDING).order_by("created_at")
