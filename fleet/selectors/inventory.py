"""Reads of the inventory: racks, GPU totals, the fleet summary and its history, node lists and
what blocks a hardware change, as aggregate queries (no per-node loops)."""

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from django.db.models import (
    Count,
    F,
    Q,
    QuerySet,
    Sum,
)
from django.db.models.functions import Coalesce
from django.utils import timezone

from ..choices import AgentActionState, Health, Lifecycle
from ..models import (
    Drive,
    FleetSnapshot,
    Hall,
    Node,
    NodeAgentAction,
    NodeEvent,
    Rack,
    hardware_change_refusals,
)
from ..wall_power import SourceMix
from .end_of_life import sanitized_drive_ids
from .power import HOT_FRACTION, KW_QUANTUM, ZERO_KW, drawn_kw_expr, source_mix_annotations, source_mix_of


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
    lifecycle_counts = {f"n_{state}": Count("nodes", filter=Q(nodes__lifecycle=state)) for state in Lifecycle.values}
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


# ---------------------------------------------------------------- dashboards
# Which lifecycle states count as "allocated" and "in repair" on every dashboard and in /metrics.
ALLOCATED_STATES = (Lifecycle.ACTIVE, Lifecycle.PROVISIONING, Lifecycle.RELEASING)
REPAIR_STATES = (
    Lifecycle.QUARANTINED,
    Lifecycle.DRAINING,
    Lifecycle.REMEDIATING,
    Lifecycle.VALIDATING,
    Lifecycle.TRIAGE,
    Lifecycle.REPAIR,
    Lifecycle.RMA,
)
# Out of service: in repair, or stuck after a failed step. Healthy nodes that are allocated,
# free, burning in or on their way out are not.
OUT_OF_SERVICE_STATES = (*REPAIR_STATES, Lifecycle.BURN_IN_FAILED, Lifecycle.PROVISION_FAILED, Lifecycle.WIPE_FAILED)
# A power reading is trusted while it is this fresh; older, the node counts at its rated maximum.


def _gpus(prefix: str = ""):
    return F(f"{prefix}node_type__gpus_per_node")


def _gpu_sum(condition: Q | None = None, prefix: str = ""):
    return Coalesce(Sum(_gpus(prefix), filter=condition), 0)


@dataclass(frozen=True)
class GpuCounts:
    total: int = 0
    healthy: int = 0
    allocated: int = 0
    in_repair: int = 0

    def __add__(self, other: "GpuCounts") -> "GpuCounts":
        return GpuCounts(
            self.total + other.total,
            self.healthy + other.healthy,
            self.allocated + other.allocated,
            self.in_repair + other.in_repair,
        )

    @property
    def utilisation_pct(self) -> float:
        return round(100.0 * self.allocated / self.total, 1) if self.total else 0.0


@dataclass(frozen=True)
class FleetSummary:
    totals: GpuCounts
    by_generation: list[tuple[str, GpuCounts]]
    by_hall: list[tuple[str, GpuCounts]]
    by_state: list[tuple[str, int]]  # (lifecycle, GPUs), largest first
    # Only with `now`: the IT (wall) draw in kW, summed per hall and rounded as hall_power() does,
    # and the sources behind it.
    it_kw: float | None = None
    power_sources: SourceMix | None = None


def fleet_summary(now: datetime | None = None) -> FleetSummary:
    """GPU totals, healthy, allocated and in repair per generation and per hall: one grouped query.
    With `now` the same scan also sums the fleet's wall draw and its sources (what hall_power()
    gives per hall), for the overview, which would otherwise scan every node a second time."""
    power = {"drawn": Coalesce(Sum(drawn_kw_expr(now)), 0.0), **source_mix_annotations(now)} if now is not None else {}
    rows = (
        Node.objects.values(
            generation=F("node_type__generation"),
            site=F("rack__hall__site__slug"),
            hall=F("rack__hall__name"),
            state=F("lifecycle"),
        )
        .annotate(
            total=_gpu_sum(),
            healthy=_gpu_sum(Q(health=Health.HEALTHY)),
            **power,
        )
        .order_by()
    )
    by_generation: dict[str, GpuCounts] = {}
    by_hall: dict[str, GpuCounts] = {}
    by_state: dict[str, int] = {}
    drawn_by_hall: dict[str, float] = {}
    sources: list[SourceMix] = []
    for row in rows:
        if power:
            hall = f"{row['site']}/{row['hall']}"
            drawn_by_hall[hall] = drawn_by_hall.get(hall, 0.0) + row["drawn"]
            sources.append(source_mix_of(row))
        counts = GpuCounts(
            total=row["total"],
            healthy=row["healthy"],
            allocated=row["total"] if row["state"] in ALLOCATED_STATES else 0,
            in_repair=row["total"] if row["state"] in REPAIR_STATES else 0,
        )
        by_generation[row["generation"]] = by_generation.get(row["generation"], GpuCounts()) + counts
        hall = f"{row['site']}/{row['hall']}"
        by_hall[hall] = by_hall.get(hall, GpuCounts()) + counts
        by_state[row["state"]] = by_state.get(row["state"], 0) + row["total"]
    return FleetSummary(
        totals=sum(by_generation.values(), GpuCounts()),
        by_generation=sorted(by_generation.items()),
        by_hall=sorted(by_hall.items()),
        by_state=sorted(by_state.items(), key=lambda kv: (-kv[1], kv[0])),
        it_kw=round(sum(round(kw, 1) for kw in drawn_by_hall.values()), 1) if power else None,
        power_sources=SourceMix(
            **{k: sum(getattr(m, k) for m in sources) for k in ("bmc", "pdu", "estimate", "rated")},
            oldest_reading_at=min((m.oldest_reading_at for m in sources if m.oldest_reading_at), default=None),
        )
        if power
        else None,
    )


def utilisation_history(*, since: datetime, resolution: str) -> list[dict]:
    """Allocated and total GPUs per recorded point and generation (summed over halls)."""

    return list(
        FleetSnapshot.objects.filter(resolution=resolution, at__gte=since)
        .values("at", "generation")
        .annotate(allocated=Sum("gpus_allocated"), total=Sum("gpus_total"))
        .order_by("at", "generation")
    )


def rack_elevation(rack_id) -> tuple[Rack, list[Node]]:
    rack = Rack.objects.select_related("hall__site").get(pk=rack_id)
    nodes = list(Node.objects.filter(rack=rack).select_related("node_type").order_by("-u_position"))
    return rack, nodes


# ---- end of life -----------------------------------------------------------------------------


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


def drives_for_nodes(node_ids) -> dict:
    """node id → [{id, serial, sanitized}] (two queries at most)."""

    rows = list(
        Drive.objects.filter(node_id__in=list(node_ids)).order_by("serial").values_list("id", "node_id", "serial")
    )
    sanitized_ids = sanitized_drive_ids([r[0] for r in rows]) if rows else set()
    out: dict = {}
    for drive_id, node_id, serial in rows:
        out.setdefault(node_id, []).append(
            {"id": str(drive_id), "serial": serial, "sanitized": drive_id in sanitized_ids}
        )
    return out


VALIDATION_HISTORY_DAYS = 7  # the flapping window (health.policy.FLAP_WINDOW)


def validation_history(node_id) -> list:
    """The node's burn-in and validation runs of the flapping window, newest first: how each
    ended (passed, failed, held for an operator), so the operator deciding sees them all."""
    since = timezone.now() - timedelta(days=VALIDATION_HISTORY_DAYS)
    return list(
        NodeEvent.objects.filter(
            node_id=node_id, at__gte=since, from_state__in=(Lifecycle.BURN_IN, Lifecycle.VALIDATING)
        )
        .exclude(to_state__in=(Lifecycle.BURN_IN, Lifecycle.VALIDATING))
        .order_by("-at")[:50]
    )


def pending_agent_actions(node) -> QuerySet:

    return NodeAgentAction.objects.filter(node=node, state=AgentActionState.PENDING).order_by("created_at")


def hardware_change_refusal(node) -> str | None:
    """Why a person may not add, change, move or remove a node's GPUs and drives now (None when
    they may): allocated, or in service since its last sanitisation (fleet.models.hardware_change_refusals)."""
    if node is None or not node.pk:
        return None
    return hardware_change_refusals([node]).get(node.pk)


def drive_removal_refusal(node) -> str | None:
    """Drives hold tenant data: they leave a node only through decommission and sanitisation, unless
    the node was never in service (a drive typed in by mistake at enrolment)."""
    refusal = hardware_change_refusal(node)
    if refusal or node is None or not node.pk:
        return refusal
    return drive_removal_message(node, served=node.allocation_memberships.exists())


def drive_removal_message(node, *, served: bool) -> str | None:
    """drive_removal_refusal's second half, for a caller that knows whether the node has served."""
    if node.lifecycle != Lifecycle.ENROLLED or served:
        return (
            f"{node.hostname} has been in service; its drives are evidence and leave only through decommission, "
            "sanitisation and disposal."
        )
    return None


def live_tenancy(node_ids) -> dict:
    """node id → [{allocation_id, allocation, tenant}] for the nodes among ``node_ids`` that a
    tenant holds now (one query, through Node's reverse relation like occupied_node_ids). What a
    destructive action's confirmation names, and what its refusal cites."""
    rows = Node.objects.filter(
        pk__in=list(node_ids), allocation_memberships__isnull=False, allocation_memberships__ended_at__isnull=True
    ).values_list(
        "pk",
        "allocation_memberships__allocation_id",
        "allocation_memberships__allocation__name",
        "allocation_memberships__allocation__tenant__slug",
    )
    held: dict = {}
    for node_id, allocation_id, name, tenant in rows:
        held.setdefault(node_id, []).append({"allocation_id": allocation_id, "allocation": name, "tenant": tenant})
    return held


def occupied_node_ids(node_ids) -> set:
    """The nodes among ``node_ids`` with a live allocation membership. Memberships are tenancy's
    rows; fleet reads them through Node's reverse relation and never imports the tenants app."""
    # isnull=False in the same filter() makes it an inner join on one membership row: a node
    # with no memberships at all must not match "ended_at IS NULL" through an outer join.
    return set(
        Node.objects.filter(
            pk__in=list(node_ids), allocation_memberships__isnull=False, allocation_memberships__ended_at__isnull=True
        ).values_list("pk", flat=True)
    )
