"""Reads of the fleet, as aggregate queries (no per-node loops)."""

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from django.db.models import (
    Case,
    Count,
    DateTimeField,
    DecimalField,
    F,
    FloatField,
    Max,
    Min,
    Q,
    QuerySet,
    Sum,
    Value,
    When,
)
from django.db.models.functions import Cast, Coalesce
from django.utils import timezone

from core.reference_data import generations

from .choices import COOLING_SATISFIES, AgentActionState, Health, Lifecycle
from .models import (
    CustodyTransfer,
    Drive,
    FleetSnapshot,
    Hall,
    Node,
    NodeAgentAction,
    NodeDisposal,
    NodeEvent,
    Rack,
    SanitizationRecord,
)
from .wall_power import SourceMix, host_share_kw

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
# A power reading is trusted while it is this fresh; older, the node counts at its rated maximum.
POWER_READING_FRESH = timedelta(minutes=2)


def fresh_wall_reading(now: datetime, prefix: str = "") -> Q:
    """A meter (BMC or PDU) reported the node's wall draw recently."""
    return Q(**{f"{prefix}wall_power_w__isnull": False, f"{prefix}wall_power_at__gte": now - POWER_READING_FRESH})


def fresh_estimate(now: datetime, prefix: str = "") -> Q:
    """No fresh meter reading, but fresh GPU power and a sourced host share for the type."""
    return ~fresh_wall_reading(now, prefix) & Q(
        **{
            f"{prefix}gpu_power_w__isnull": False,
            f"{prefix}last_heartbeat_at__gte": now - POWER_READING_FRESH,
            f"{prefix}node_type__gpu_model__in": list(host_share_kw()),
        }
    )


def fresh_reading(now: datetime, prefix: str = "") -> Q:
    """The node's draw is known from a reading (measured or estimated), not assumed."""
    return fresh_wall_reading(now, prefix) | fresh_estimate(now, prefix)


def host_share_kw_expr(prefix: str = ""):
    return Case(
        *(
            When(**{f"{prefix}node_type__gpu_model": model}, then=Value(float(kw)))
            for model, kw in host_share_kw().items()
        ),
        default=Value(0.0),
        output_field=FloatField(),
    )


def drawn_kw_expr(now: datetime, prefix: str = ""):
    """A node's wall draw in kW: a fresh meter reading (BMC/PDU), else an estimate (GPU board
    power + the type's host share), else its type's rated maximum. `power_source_expr` says which."""
    return Case(
        When(fresh_wall_reading(now, prefix), then=Cast(F(f"{prefix}wall_power_w"), FloatField()) / 1000.0),
        When(
            fresh_estimate(now, prefix),
            then=Cast(F(f"{prefix}gpu_power_w"), FloatField()) / 1000.0 + host_share_kw_expr(prefix),
        ),
        default=Cast(F(f"{prefix}node_type__node_kw"), FloatField()),
        output_field=FloatField(),
    )


def reading_at_expr(now: datetime, prefix: str = ""):
    """When the reading behind `drawn_kw_expr` was taken (null for rated)."""
    return Case(
        When(fresh_wall_reading(now, prefix), then=F(f"{prefix}wall_power_at")),
        When(fresh_estimate(now, prefix), then=F(f"{prefix}last_heartbeat_at")),
        default=Value(None),
        output_field=DateTimeField(),
    )


def source_mix_annotations(now: datetime, prefix: str = "", count: str = "id") -> dict:
    """Aggregates giving a SourceMix: nodes per source and the oldest reading used."""
    wall = fresh_wall_reading(now, prefix)
    estimate = fresh_estimate(now, prefix)
    return {
        "src_bmc": Count(count, filter=wall & Q(**{f"{prefix}wall_power_source": "bmc"})),
        "src_pdu": Count(count, filter=wall & Q(**{f"{prefix}wall_power_source": "pdu"})),
        "src_estimate": Count(count, filter=estimate),
        "src_rated": Count(count, filter=~wall & ~estimate),
        "oldest_reading_at": Min(reading_at_expr(now, prefix)),
    }


def source_mix_of(row) -> SourceMix:
    get = row.get if isinstance(row, dict) else (lambda k: getattr(row, k))
    return SourceMix(
        bmc=get("src_bmc") or 0,
        pdu=get("src_pdu") or 0,
        estimate=get("src_estimate") or 0,
        rated=get("src_rated") or 0,
        oldest_reading_at=get("oldest_reading_at"),
    )


def node_power(node, now: datetime) -> tuple[float, str, datetime | None]:
    """One node's wall draw (kW), its source and when it was read, by the same rules as the aggregates."""
    fresh_after = now - POWER_READING_FRESH
    if node.wall_power_w is not None and node.wall_power_at and node.wall_power_at >= fresh_after:
        return node.wall_power_w / 1000.0, node.wall_power_source, node.wall_power_at
    host = host_share_kw().get(node.node_type.gpu_model)
    if (
        host is not None
        and node.gpu_power_w is not None
        and node.last_heartbeat_at
        and node.last_heartbeat_at >= fresh_after
    ):
        return node.gpu_power_w / 1000.0 + float(host), "estimate", node.last_heartbeat_at
    return float(node.node_type.node_kw), "rated", None


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


def fleet_summary() -> FleetSummary:
    """GPU totals, healthy, allocated and in repair per generation and per hall: one grouped query."""
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
        )
        .order_by()
    )
    by_generation: dict[str, GpuCounts] = {}
    by_hall: dict[str, GpuCounts] = {}
    by_state: dict[str, int] = {}
    for row in rows:
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
    )


def utilisation_history(*, since: datetime, resolution: str) -> list[dict]:
    """Allocated and total GPUs per recorded point and generation (summed over halls)."""

    return list(
        FleetSnapshot.objects.filter(resolution=resolution, at__gte=since)
        .values("at", "generation")
        .annotate(allocated=Sum("gpus_allocated"), total=Sum("gpus_total"))
        .order_by("at", "generation")
    )


@dataclass(frozen=True)
class HallPower:
    hall_id: object
    name: str
    budget_kw: float
    pue: float
    drawn_kw: float
    rated_kw: float
    nodes: int
    measured_nodes: int
    sources: SourceMix = SourceMix()
    age_s: int | None = None
    age_s: int | None = None  # age of the oldest reading in the figure; None when all of it is rated

    @property
    def facility_kw(self) -> float:
        return round(self.drawn_kw * self.pue, 1)

    @property
    def load_pct(self) -> float:
        return round(100.0 * self.drawn_kw / self.budget_kw, 1) if self.budget_kw else 0.0


def hall_power(*, now: datetime) -> list[HallPower]:
    """Each hall's IT (wall) draw against its budget, with the sources behind it: one query."""
    halls = (
        Hall.objects.select_related("site")
        .annotate(
            nodes_n=Count("racks__nodes"),
            measured_n=Count("racks__nodes", filter=fresh_wall_reading(now, "racks__nodes__")),
            **source_mix_annotations(now, "racks__nodes__", count="racks__nodes"),
            drawn=Coalesce(Sum(drawn_kw_expr(now, "racks__nodes__")), 0.0),
            rated=Coalesce(Sum(Cast(F("racks__nodes__node_type__node_kw"), FloatField())), 0.0),
        )
        .order_by("site__name", "name")
    )
    return [
        HallPower(
            hall_id=h.pk,
            name=str(h),
            budget_kw=float(h.it_power_budget_kw),
            pue=float(h.pue),
            drawn_kw=round(h.drawn, 1),
            rated_kw=round(h.rated, 1),
            nodes=h.nodes_n,
            measured_nodes=h.measured_n,
            sources=source_mix_of(h),
            age_s=source_mix_of(h).age_seconds(now),
        )
        for h in halls
    ]


def hall_power_history(*, since: datetime, resolution: str) -> list[dict]:
    """Per hall and recorded point: summed rack draw and whether any rack's point was not measured
    (`sources`: the distinct sources behind it). One grouped query."""
    from .models import PowerPoint

    rows = (
        PowerPoint.objects.filter(resolution=resolution, at__gte=since)
        .values("at", hall=F("rack__hall__name"), site=F("rack__hall__site__slug"))
        .annotate(kw=Sum("kw"), lo=Min("source"), hi=Max("source"))
        .order_by("at")
    )
    return [
        {
            "at": r["at"],
            "hall": f"{r['site']}/{r['hall']}",
            "kw": r["kw"],
            "source": r["lo"] if r["lo"] == r["hi"] else "mixed",
        }
        for r in rows
    ]


@dataclass
class RackDraw:
    pk: object
    name: str
    hall: str
    hall_id: object
    row: int
    column: int
    rated_power_kw: Decimal
    usable_kw: Decimal
    node_count: int = 0
    measured_count: int = 0
    drawn: float = 0.0
    placed: float = 0.0
    unhealthy: int = 0
    degraded: int = 0
    unknown: int = 0
    sources: SourceMix = SourceMix()
    age_s: int | None = None


def racks_with_draw(*, now: datetime, hall_id=None) -> list[RackDraw]:
    """Racks with drawn kW (readings or rated), rated kW of what they hold, and node health counts.

    Two queries: node figures grouped by rack id, then the racks as plain rows. (Grouping the
    rack rows themselves, or building 6,000 model instances, is ~10x slower.)"""
    nodes = Node.objects.all() if not hall_id else Node.objects.filter(rack__hall_id=hall_id)
    stats = {
        row["rack_id"]: row
        for row in nodes.values("rack_id")
        .annotate(
            node_count=Count("id"),
            measured_count=Count("id", filter=fresh_wall_reading(now)),
            **source_mix_annotations(now),
            drawn=Coalesce(Sum(drawn_kw_expr(now)), 0.0),
            placed=Coalesce(Sum(Cast(F("node_type__node_kw"), FloatField())), 0.0),
            unhealthy=Count("id", filter=Q(health=Health.UNHEALTHY)),
            degraded=Count("id", filter=Q(health=Health.DEGRADED)),
            unknown=Count("id", filter=Q(health=Health.UNKNOWN)),
        )
        .order_by()
    }
    racks = Rack.objects.order_by("hall__name", "row", "column", "name")
    if hall_id:
        racks = racks.filter(hall_id=hall_id)
    rows = []
    for r in racks.values(
        "id",
        "name",
        "hall_id",
        "hall__site__slug",
        "hall__name",
        "row",
        "column",
        "rated_power_kw",
        "cooling_capacity_kw",
    ):
        row = stats.get(r["id"], {})
        figures = {
            k: v for k, v in row.items() if k != "rack_id" and not k.startswith("src_") and k != "oldest_reading_at"
        }
        if row:
            figures["sources"] = source_mix_of(row)
            figures["age_s"] = figures["sources"].age_seconds(now)
        rows.append(
            RackDraw(
                pk=r["id"],
                name=r["name"],
                hall=f"{r['hall__site__slug']}/{r['hall__name']}",
                hall_id=r["hall_id"],
                row=r["row"],
                column=r["column"],
                rated_power_kw=r["rated_power_kw"],
                usable_kw=min(r["rated_power_kw"], r["cooling_capacity_kw"]),
                **figures,
            )
        )
    return rows


def rack_load_fraction(rack) -> float:
    usable = float(rack.usable_kw)
    return rack.drawn / usable if usable else 0.0


@dataclass(frozen=True)
class PlacementOption:
    generation: str
    gpu_model: str
    needs_kw: float
    cooling: str
    positions: int
    by_hall: list[tuple[str, int]]
    source: str


@dataclass(frozen=True)
class CoolingHeadroom:
    hall: str
    cooling: str
    positions: int
    empty_positions: int
    free_kw: float
    largest_free_kw: float


def placement_headroom() -> tuple[list[CoolingHeadroom], list[PlacementOption]]:
    """Free kW per position (usable minus rated kW already placed) grouped by hall and cooling, and for
    each product in generations.csv how many positions could take a full rack of it. One query."""

    racks = list(
        Rack.objects.values("id", "hall__site__slug", "hall__name", "cooling", "rated_power_kw", "cooling_capacity_kw")
        .annotate(placed=Coalesce(Sum(Cast(F("nodes__node_type__node_kw"), FloatField())), 0.0), n=Count("nodes"))
        .order_by()
    )
    groups: dict[tuple[str, str], list] = {}
    for r in racks:
        r["free"] = max(0.0, float(min(r["rated_power_kw"], r["cooling_capacity_kw"])) - r["placed"])
        r["hall"] = f"{r['hall__site__slug']}/{r['hall__name']}"
        groups.setdefault((r["hall"], r["cooling"]), []).append(r)
    headroom = [
        CoolingHeadroom(
            hall=hall,
            cooling=cooling,
            positions=len(rows),
            empty_positions=sum(1 for r in rows if not r["n"]),
            free_kw=round(sum(r["free"] for r in rows), 1),
            largest_free_kw=round(max(r["free"] for r in rows), 1),
        )
        for (hall, cooling), rows in sorted(groups.items())
    ]
    options = []
    for gen in generations():
        needs = gen.rack_kw_typical or gen.node_kw
        coolings = COOLING_SATISFIES[gen.cooling]
        fits: dict[str, int] = {}
        for r in racks:
            if r["cooling"] in coolings and r["free"] >= float(needs):
                fits[r["hall"]] = fits.get(r["hall"], 0) + 1
        options.append(
            PlacementOption(
                generation=gen.generation,
                gpu_model=gen.gpu_model,
                needs_kw=float(needs),
                cooling=gen.cooling,
                positions=sum(fits.values()),
                by_hall=sorted(fits.items()),
                source=gen.source,
            )
        )
    return headroom, options


def rack_elevation(rack_id) -> tuple[Rack, list[Node]]:
    rack = Rack.objects.select_related("hall__site").get(pk=rack_id)
    nodes = list(Node.objects.filter(rack=rack).select_related("node_type").order_by("-u_position"))
    return rack, nodes


# ---- end of life -----------------------------------------------------------------------------


def sanitized_drive_ids(drive_ids) -> set:
    """The drives among `drive_ids` that have a passing (verified) sanitisation record."""

    return set(
        SanitizationRecord.objects.filter(drive_id__in=list(drive_ids), verified=True)
        .values_list("drive_id", flat=True)
        .distinct()
    )


@dataclass(frozen=True)
class DataHandlingStatus:
    """Where a node stands on everything that gates it leaving (retire, dispose): the drive
    gate (fleet.services.drive_gate) for retire and for dispose, plus the checklist."""

    drives_total: int
    drives_sanitized: int
    unsanitized: list[dict]  # [{"id", "serial", "required_method", "problem"}] of drives the gate does not pass
    bmc_reset_at: object
    asset_tags_removed_at: object
    custody_transfers: int
    gate: object  # GateStatus for retire (destination, inventory, per-drive method and record)
    dispose_gate: object  # GateStatus for dispose

    @property
    def drives_done(self) -> bool:
        return self.gate.passed

    @property
    def retire_missing(self) -> list[str]:
        missing = list(self.gate.missing)
        if self.bmc_reset_at is None:
            missing.append("BMC reset (credentials reset, logs cleared) not recorded")
        return missing

    @property
    def dispose_missing(self) -> list[str]:
        missing = list(self.dispose_gate.missing)
        if self.asset_tags_removed_at is None:
            missing.append("asset tags not recorded as removed")
        if not self.custody_transfers:
            missing.append("no chain-of-custody transfer recorded")
        return missing


def data_handling_status(node_ids) -> dict:
    """node id → DataHandlingStatus, in a fixed number of queries whatever the number of nodes."""
    from .services.drive_gate import DISPOSE, RETIRE, gate_statuses

    node_ids = list(node_ids)
    both = gate_statuses(node_ids, (RETIRE, DISPOSE))
    gates, dispose_gates = both[RETIRE], both[DISPOSE]
    disposals = {d.node_id: d for d in NodeDisposal.objects.filter(node_id__in=node_ids)}
    custody = dict(
        CustodyTransfer.objects.filter(node_id__in=node_ids)
        .values("node_id")
        .annotate(n=Count("id"))
        .values_list("node_id", "n")
    )
    out = {}
    for nid in node_ids:
        gate = gates[nid]
        disposal = disposals.get(nid)
        out[nid] = DataHandlingStatus(
            drives_total=len(gate.drives),
            drives_sanitized=sum(1 for d in gate.drives if d.ok),
            unsanitized=[
                {"id": d.drive_id, "serial": d.serial, "required_method": d.required, "problem": d.problem}
                for d in gate.drives
                if not d.ok
            ],
            bmc_reset_at=disposal.bmc_reset_at if disposal else None,
            asset_tags_removed_at=disposal.asset_tags_removed_at if disposal else None,
            custody_transfers=custody.get(nid, 0),
            gate=gate,
            dispose_gate=dispose_gates[nid],
        )
    return out


def certificate_for(node_id) -> dict:
    """Everything the certificate of sanitisation shows: the node, the destination, every drive
    (the agent's inventory and the records) with the method required, the record that counts
    and its evidence, the BMC reset and the chain of custody. Raises Node.DoesNotExist."""

    node = Node.objects.select_related("node_type", "rack__hall__site").get(pk=node_id)
    status = data_handling_status([node.pk])[node.pk]
    drives = {str(d.pk): d for d in Drive.objects.filter(node=node)}
    records = {str(r.pk): r for r in SanitizationRecord.objects.filter(drive__node=node, verified=True)}
    rows = [(line, drives.get(line.drive_id), records.get(line.record_id)) for line in status.gate.drives]
    disposal = NodeDisposal.objects.filter(node=node).first()
    custody = list(CustodyTransfer.objects.filter(node=node).order_by("at", "id"))
    # The named person who signed the node off: whoever retired it (or, before that, reset its BMC).
    retired = (
        NodeEvent.objects.filter(node=node, to_state=Lifecycle.RETIRED)
        .exclude(from_state=Lifecycle.RETIRED)
        .order_by("-at")
        .values_list("actor", "at")
        .first()
    )
    signed_off_by, signed_off_at = retired or (
        (disposal.bmc_reset_by, disposal.bmc_reset_at) if disposal else ("", None)
    )
    return {
        "node": node,
        "rows": rows,
        "disposal": disposal,
        "status": status,
        "gate": status.gate,
        "custody": custody,
        "complete": not status.retire_missing,
        "signed_off_by": signed_off_by or "(not signed off)",
        "signed_off_at": signed_off_at,
    }


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
    """Why a node's GPUs may not be added or removed now (None when they may)."""
    if node is not None and node.pk and node.is_allocated():
        return f"{node.hostname} carries a tenant allocation; its GPUs and drives stay as they are until it is drained."
    return None


def drive_removal_refusal(node) -> str | None:
    """Drives hold tenant data: they leave a node only through decommission and sanitisation, unless
    the node was never in service (a drive typed in by mistake at enrolment)."""
    refusal = hardware_change_refusal(node)
    if refusal:
        return refusal
    if node is not None and node.pk and (node.lifecycle != Lifecycle.ENROLLED or node.allocation_memberships.exists()):
        return (
            f"{node.hostname} has been in service; its drives are evidence and leave only through decommission, "
            "sanitisation and disposal."
        )
    return None


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
