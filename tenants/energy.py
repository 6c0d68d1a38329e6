"""Energy per allocation and month, from the nodes' hourly energy (fleet.NodeEnergyHour) and the
allocations' node memberships over time. Read-only; every query is scoped to one tenant.

IT kWh is the nodes' wall energy while they belonged to the allocation; facility kWh is IT kWh ×
the hall's PUE; cost is facility kWh × the site's electricity price and carbon facility kWh × the
site's grid intensity (the grid supplies the whole facility, not only the IT load). An hour a
membership covers only in part is prorated by the part it covers (energy inside an hour is taken as
even). See docs/power.md for why this is computed here and not metered to the ledger.
"""

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal

from django.db.models import F, Q, Sum
from django.db.models.functions import TruncMonth

from fleet.models import NodeEnergyHour
from tenants.models import AllocationNode

HOUR = timedelta(hours=1)
J_PER_KWH = Decimal(3_600_000)
KWH = Decimal("0.001")
KG = Decimal("0.001")
CENT = Decimal("0.01")


@dataclass
class AllocationEnergy:
    """One allocation's energy in one month (UTC)."""

    allocation_id: object
    allocation_name: str
    month: str  # YYYY-MM
    it_kwh: Decimal = Decimal("0")
    measured_kwh: Decimal = Decimal("0")  # of IT kWh, from meter counters (BMC/PDU)
    estimated_kwh: Decimal = Decimal("0")  # of IT kWh, from GPU counters + host share
    facility_kwh: Decimal = Decimal("0")
    kg_co2e: Decimal = Decimal("0")
    energy_cost: Decimal = Decimal("0")
    currency: str = "USD"
    gpu_hours: Decimal = Decimal("0")
    covered_seconds: Decimal = Decimal("0")  # node-seconds with counters behind them
    node_seconds: Decimal = Decimal("0")  # node-seconds the allocation held nodes this month
    _factors: list = field(default_factory=list, repr=False)

    @property
    def avg_kw_per_gpu(self) -> Decimal | None:
        return (self.it_kwh / self.gpu_hours).quantize(KWH) if self.gpu_hours else None

    @property
    def coverage_pct(self) -> Decimal | None:
        """How much of the allocation's node time the counters cover (100 = all of it)."""
        if not self.node_seconds:
            return None
        return min(Decimal(100), (100 * self.covered_seconds / self.node_seconds)).quantize(Decimal("0.1"))

    @property
    def source(self) -> str:
        if self.measured_kwh and self.estimated_kwh:
            return "mixed"
        if self.measured_kwh:
            return "measured"
        return "estimate" if self.estimated_kwh else "none"


def _hour(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


def _month(moment: datetime) -> str:
    return f"{moment.year:04d}-{moment.month:02d}"


def _months_between(start: datetime, end: datetime):
    """[(month label, month start, month end)] covering [start, end)."""
    cursor = start.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    while cursor < end:
        nxt = (cursor + timedelta(days=32)).replace(day=1)
        yield _month(cursor), max(cursor, start), min(nxt, end)
        cursor = nxt


def allocation_energy(*, tenant_id, start: datetime, end: datetime) -> list[AllocationEnergy]:
    """Energy per (allocation, month) for one tenant's allocations in [start, end) (by hour
    start). Three queries, whatever the number of allocations, nodes or hours."""
    memberships = {
        m["id"]: m
        for m in AllocationNode.objects.filter(allocation__tenant_id=tenant_id, started_at__lt=end)
        .filter(Q(ended_at__isnull=True) | Q(ended_at__gt=start))
        .values(
            "id",
            "allocation_id",
            "allocation__name",
            "node_id",
            "started_at",
            "ended_at",
            gpus=F("node__node_type__gpus_per_node"),
            pue=F("node__rack__hall__pue"),
            price=F("node__rack__hall__site__electricity_usd_per_kwh"),
            intensity=F("node__rack__hall__site__grid_kg_co2e_per_kwh"),
        )
    }
    if not memberships:
        return []
    first_hour = start.replace(minute=0, second=0, microsecond=0)
    # Hours wholly inside a membership: summed by the database.
    # (One filter() call: conditions on the memberships must all hold for the same membership.)
    inside = (
        NodeEnergyHour.objects.filter(
            Q(node__allocation_memberships__ended_at__isnull=True)
            | Q(node__allocation_memberships__ended_at__gte=F("hour") + HOUR),
            node__allocation_memberships__allocation__tenant_id=tenant_id,
            node__allocation_memberships__started_at__lte=F("hour"),
            hour__gte=first_hour,
            hour__lt=end,
        )
        .values(membership=F("node__allocation_memberships__id"), month=TruncMonth("hour"), src=F("source"))
        .annotate(joules=Sum("it_energy_j"), seconds=Sum("seconds"))
        .order_by()
    )
    # Hours a membership starts or ends inside (at most two per membership): fetched by (node, hour)
    # through the unique index and prorated here.
    edges_of: dict = {}  # (node id, hour) → {membership ids} (a set: one that starts and ends in an hour counts once)
    for m in memberships.values():
        for moment in (m["started_at"], m["ended_at"]):
            if moment is not None and moment != _hour(moment):
                edges_of.setdefault((m["node_id"], _hour(moment)), set()).add(m["id"])
    edge_rows = []
    if edges_of:
        edge_hours = {hour for _, hour in edges_of if first_hour <= hour < end}
        edge_nodes = {node for node, _ in edges_of}
        for r in NodeEnergyHour.objects.filter(node_id__in=edge_nodes, hour__in=edge_hours).values(
            "node_id", "hour", "source", "it_energy_j", "seconds"
        ):
            for membership_id in edges_of.get((r["node_id"], r["hour"]), ()):
                edge_rows.append({**r, "membership": membership_id})

    out: dict[tuple, AllocationEnergy] = {}

    def row_for(m, month: str) -> AllocationEnergy:
        key = (m["allocation_id"], month)
        if key not in out:
            out[key] = AllocationEnergy(
                allocation_id=m["allocation_id"], allocation_name=m["allocation__name"], month=month
            )
        return out[key]

    def credit(m, month: str, source: str, joules: Decimal, seconds: Decimal) -> None:
        row = row_for(m, month)
        kwh = joules / J_PER_KWH
        facility = kwh * m["pue"]
        row.it_kwh += kwh
        if source == "estimate":
            row.estimated_kwh += kwh
        else:
            row.measured_kwh += kwh
        row.facility_kwh += facility
        row.kg_co2e += facility * m["intensity"]
        row.energy_cost += facility * m["price"]
        row.covered_seconds += seconds

    for r in inside:
        m = memberships.get(r["membership"])
        if m is not None:
            credit(m, _month(r["month"]), r["src"], Decimal(r["joules"] or 0), Decimal(r["seconds"] or 0))
    for r in edge_rows:
        m = memberships[r["membership"]]
        hour_end = r["hour"] + HOUR
        overlap_start = max(r["hour"], m["started_at"])
        overlap_end = min(hour_end, m["ended_at"] or hour_end)
        fraction = Decimal(max(0.0, (overlap_end - overlap_start).total_seconds())) / Decimal(3600)
        credit(
            m, _month(r["hour"]), r["source"], Decimal(r["it_energy_j"]) * fraction, Decimal(r["seconds"]) * fraction
        )

    now_end = end
    for m in memberships.values():
        held_from = max(m["started_at"], start)
        held_to = min(m["ended_at"] or now_end, now_end)
        for month, month_start, month_end in _months_between(held_from, held_to):
            seconds = Decimal(max(0.0, (min(held_to, month_end) - max(held_from, month_start)).total_seconds()))
            if seconds:
                row = row_for(m, month)
                row.node_seconds += seconds
                row.gpu_hours += seconds * m["gpus"] / 3600
    for row in out.values():
        row.it_kwh = row.it_kwh.quantize(KWH)
        row.measured_kwh = row.measured_kwh.quantize(KWH)
        row.estimated_kwh = row.estimated_kwh.quantize(KWH)
        row.facility_kwh = row.facility_kwh.quantize(KWH)
        row.kg_co2e = row.kg_co2e.quantize(KG)
        row.energy_cost = row.energy_cost.quantize(CENT)
        row.gpu_hours = row.gpu_hours.quantize(KWH)
    return sorted(out.values(), key=lambda r: (r.month, r.allocation_name, str(r.allocation_id)))


def energy_totals(rows: list[AllocationEnergy]) -> dict[str, dict]:
    """Per month: the sums of its allocations' rows (what an invoice's energy line adds up from)."""
    totals: dict[str, dict] = defaultdict(
        lambda: {
            "it_kwh": Decimal("0"),
            "facility_kwh": Decimal("0"),
            "kg_co2e": Decimal("0"),
            "energy_cost": Decimal("0"),
        }
    )
    for r in rows:
        t = totals[r.month]
        t["it_kwh"] += r.it_kwh
        t["facility_kwh"] += r.facility_kwh
        t["kg_co2e"] += r.kg_co2e
        t["energy_cost"] += r.energy_cost
    return dict(totals)
