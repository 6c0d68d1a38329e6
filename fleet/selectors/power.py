"""Reads of power: each node's drawn kW with its source and age, rack and hall draw, history and
placement headroom, as aggregate queries (no per-node loops)."""

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
    Sum,
    Value,
    When,
)
from django.db.models.functions import Cast, Coalesce

from core.reference_data import generations

from ..choices import COOLING_SATISFIES, Health
from ..models import (
    Hall,
    Node,
    PowerPoint,
    Rack,
)
from ..wall_power import SourceMix, host_share_kw

ZERO_KW = Value(Decimal("0"), output_field=DecimalField(max_digits=9, decimal_places=2))
HOT_FRACTION = Decimal("0.9")  # a rack at or above this share of its usable kW is highlighted
KW_QUANTUM = Decimal("0.01")


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
            pue=float(h.site.pue),  # the site's PUE, the one the energy figures use
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


@dataclass(frozen=True)
class GpuTelemetry:
    """The GPUs' figures from the node's latest heartbeat that listed them (no query: they ride on
    the node row). `at` is when the control plane received that heartbeat; `stale` past
    POWER_READING_FRESH, the rule by which the power pages stop counting a reading as measured."""

    at: datetime | None
    stale: bool
    rows: list[dict]


def gpu_telemetry(node, gpus, now: datetime) -> GpuTelemetry:
    """One row per GPU, recorded or reported: index, uuid, serial, reported (bool), and the last
    report's temperature_c, power_w (board power), xid_errors, ecc_sbe, ecc_dbe, retired_pages,
    row_remap_pending, row_remap_failed where the agent sent them."""
    report = node.gpu_telemetry or {}
    reported = {g["index"]: g for g in report.get("gpus", ())}
    at = datetime.fromisoformat(report["at"]) if report.get("at") else None
    recorded_by_index = {g.index: g for g in gpus}
    rows = []
    for index in sorted(recorded_by_index.keys() | reported.keys()):
        recorded = recorded_by_index.get(index)
        figures = reported.get(index)
        rows.append(
            {
                "index": index,
                "uuid": recorded.uuid if recorded else "",
                "serial": recorded.serial if recorded else "",
                "reported": figures is not None,
                **(figures or {}),
            }
        )
    return GpuTelemetry(at=at, stale=at is not None and now - at > POWER_READING_FRESH, rows=rows)
