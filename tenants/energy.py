"""Energy per allocation and month, from the nodes' hourly energy (fleet.NodeEnergyHour) and the
allocations' node memberships over time. Read-only; every query is scoped to one tenant.

IT kWh is the nodes' wall energy while they belonged to the allocation; facility kWh is IT kWh ×
the site's PUE; cost is facility kWh × the site's electricity price and carbon facility kWh × the
site's grid intensity (the grid supplies the whole facility, not only the IT load): the hour's
intensity where the site has an uploaded hourly profile for it, the site's constant elsewhere. An
hour a membership covers only in part is prorated by the part it covers (energy inside an hour is
taken as even). See docs/power.md for why this is computed here and not metered to the ledger.

A month an allocation held a node from its first to its last second is read from the node's
month roll-up (fleet.NodeEnergyMonth, one row); only the months a membership starts or ends
inside read hourly rows. Carbon reads hourly rows only for the hours a profile covers.
"""

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from functools import lru_cache

from django.db.models import DecimalField, ExpressionWrapper, F, OuterRef, Q, Subquery, Sum
from django.db.models.functions import TruncMonth

from fleet.models import GridIntensityHour, NodeEnergyHour, NodeEnergyMonth
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
    profiled_kwh: Decimal = Decimal("0")  # of facility kWh, carbon taken at the hour's profiled intensity
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
    def carbon_source(self) -> str:
        """Which intensity the carbon figure is at: `profile` (the site's uploaded hourly profile
        covered every hour), `constant` (the site's constant), `mixed` (some of each) or `none`."""
        if not self.facility_kwh:
            return "none"
        if not self.profiled_kwh:
            return "constant"
        return "profile" if self.profiled_kwh >= self.facility_kwh else "mixed"

    @property
    def carbon_profile_pct(self) -> Decimal | None:
        """The share of facility kWh whose carbon is at a profiled hour's intensity."""
        if not self.facility_kwh:
            return None
        return min(Decimal(100), 100 * self.profiled_kwh / self.facility_kwh).quantize(Decimal("0.1"))

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


def _next_month(moment: datetime) -> datetime:
    return (moment.replace(day=1, hour=0, minute=0, second=0, microsecond=0) + timedelta(days=32)).replace(day=1)


@lru_cache(maxsize=4096)
def _months_between(start: datetime, end: datetime) -> tuple:
    """((month label, month start, month end), ...) covering [start, end). Cached: most of a
    tenant's memberships span the same clipped window, and a month read walks each of them twice."""
    out = []
    cursor = start.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    while cursor < end:
        nxt = (cursor + timedelta(days=32)).replace(day=1)
        out.append((_month(cursor), max(cursor, start), min(nxt, end)))
        cursor = nxt
    return tuple(out)


def _memberships(tenant_id, start, end) -> dict:
    return {
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
            site_id=F("node__rack__hall__site_id"),
            pue=F("node__rack__hall__site__pue"),
            price=F("node__rack__hall__site__electricity_usd_per_kwh"),
            intensity=F("node__rack__hall__site__grid_kg_co2e_per_kwh"),
        )
    }


def _split_by_month(memberships: dict, start: datetime, end: datetime):
    """(whole, partial): whole maps (node id, month date) → membership id for calendar months the
    window and the membership cover entirely (read from the month roll-up); partial maps month
    start → {membership ids} for the rest (read from hourly rows)."""
    whole: dict = {}
    partial: dict = defaultdict(set)
    for m in memberships.values():
        held_from = max(m["started_at"], start)
        held_to = min(m["ended_at"] or end, end)
        for _, month_start, month_end in _months_between(held_from, held_to):
            calendar_start = month_start.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
            if month_start == calendar_start and month_end == _next_month(calendar_start):
                whole[(m["node_id"], calendar_start.date())] = m["id"]
            else:
                partial[calendar_start].add(m["id"])
    return whole, partial


def _inside_hours(tenant_id, q: Q):
    """Hourly rows wholly inside one of the tenant's memberships and matching `q`, as a queryset
    in one filter() call (conditions on the memberships must all hold for the same membership)."""
    return NodeEnergyHour.objects.filter(
        Q(node__allocation_memberships__ended_at__isnull=True)
        | Q(node__allocation_memberships__ended_at__gte=F("hour") + HOUR),
        q,
        node__allocation_memberships__allocation__tenant_id=tenant_id,
        node__allocation_memberships__started_at__lte=F("hour"),
    )


def allocation_energy(*, tenant_id, start: datetime, end: datetime) -> list[AllocationEnergy]:
    """Energy per (allocation, month) for one tenant's allocations in [start, end) (by hour
    start). A fixed number of queries whatever the number of allocations, nodes or hours: the
    memberships, the month roll-up, the hours of partly held months and their edge hours, plus
    two when a site of the tenant's has an hourly carbon profile in the window."""
    start, end = start.astimezone(UTC), end.astimezone(UTC)  # months are UTC months
    memberships = _memberships(tenant_id, start, end)
    if not memberships:
        return []
    first_hour = _hour(start)
    whole, partial = _split_by_month(memberships, start, end)
    # (membership, month label) → {source: [joules, seconds]}
    energy: dict = defaultdict(lambda: defaultdict(lambda: [Decimal(0), Decimal(0)]))

    def add(membership_id, month: str, source: str, joules, seconds) -> None:
        cell = energy[(membership_id, month)][source]
        cell[0] += joules
        cell[1] += seconds

    if whole:
        # By a join to the tenant's memberships rather than a list of node ids (a long IN list costs
        # more to send and plan than the join); a node held twice in the window comes back twice,
        # hence the distinct row ids.
        seen = set()
        for r in NodeEnergyMonth.objects.filter(
            Q(node__allocation_memberships__ended_at__isnull=True)
            | Q(node__allocation_memberships__ended_at__gt=start),
            node__allocation_memberships__allocation__tenant_id=tenant_id,
            node__allocation_memberships__started_at__lt=end,
            month__in={month for _, month in whole},
        ).values_list("id", "node_id", "month", "source", "it_energy_j", "seconds"):
            membership_id = whole.get((r[1], r[2]))
            if membership_id is not None and r[0] not in seen:
                seen.add(r[0])
                add(membership_id, _month(r[2]), r[3], Decimal(r[4]), Decimal(r[5]))
    partly = Q(pk__in=[])
    for month_start, ids in partial.items():
        partly |= Q(
            hour__gte=max(month_start, first_hour),
            hour__lt=min(_next_month(month_start), end),
            node__allocation_memberships__id__in=ids,
        )
    if partial:
        inside = (
            _inside_hours(tenant_id, partly)
            .values(membership=F("node__allocation_memberships__id"), month=TruncMonth("hour"), src=F("source"))
            .annotate(joules=Sum("it_energy_j"), seconds=Sum("seconds"))
            .order_by()
        )
        for r in inside:
            add(r["membership"], _month(r["month"]), r["src"], Decimal(r["joules"] or 0), Decimal(r["seconds"] or 0))
    edge_rows = _edge_rows(memberships, first_hour, end)
    for r in edge_rows:
        add(r["membership"], _month(r["hour"]), r["source"], r["joules"], r["seconds"])
    profiled = _profiled_carbon(tenant_id, memberships, first_hour, end, edge_rows)
    return _rows(memberships, energy, profiled, start, end)


def _edge_rows(memberships: dict, first_hour: datetime, end: datetime) -> list[dict]:
    """Hours a membership starts or ends inside (at most two per membership), fetched by (node,
    hour) through the unique index, with their joules and seconds prorated by the part covered."""
    edges_of: dict = {}  # (node id, hour) → {membership ids} (a set: one that starts and ends in an hour counts once)
    for m in memberships.values():
        for moment in (m["started_at"], m["ended_at"]):
            if moment is not None and moment != _hour(moment) and first_hour <= _hour(moment) < end:
                edges_of.setdefault((m["node_id"], _hour(moment)), set()).add(m["id"])
    if not edges_of:
        return []
    rows = []
    for r in NodeEnergyHour.objects.filter(
        node_id__in={node for node, _ in edges_of}, hour__in={hour for _, hour in edges_of}
    ).values("node_id", "hour", "source", "it_energy_j", "seconds"):
        for membership_id in edges_of.get((r["node_id"], r["hour"]), ()):
            m = memberships[membership_id]
            hour_end = r["hour"] + HOUR
            overlap_start = max(r["hour"], m["started_at"])
            overlap_end = min(hour_end, m["ended_at"] or hour_end)
            fraction = Decimal(max(0.0, (overlap_end - overlap_start).total_seconds())) / Decimal(3600)
            rows.append(
                {
                    "membership": membership_id,
                    "node_id": r["node_id"],
                    "hour": r["hour"],
                    "source": r["source"],
                    "joules": Decimal(r["it_energy_j"]) * fraction,
                    "seconds": Decimal(r["seconds"]) * fraction,
                }
            )
    return rows


def _profiled_carbon(tenant_id, memberships: dict, first_hour: datetime, end: datetime, edge_rows) -> dict:
    """(membership, month label) → [IT joules in profiled hours, Σ joules × the hour's kg/kWh], for
    the hours an uploaded profile covers. Nothing is read when no site of the tenant's has one."""
    sites = {m["site_id"] for m in memberships.values()}
    profile = GridIntensityHour.objects.filter(site_id__in=sites, hour__gte=first_hour, hour__lt=end)
    profiled_sites = set(profile.values_list("site_id", flat=True).distinct())
    if not profiled_sites:
        return {}
    ids = [m["id"] for m in memberships.values() if m["site_id"] in profiled_sites]
    intensity = Subquery(
        GridIntensityHour.objects.filter(site_id=OuterRef("node__rack__hall__site_id"), hour=OuterRef("hour")).values(
            "kg_co2e_per_kwh"
        )[:1]
    )
    out: dict = defaultdict(lambda: [Decimal(0), Decimal(0)])
    rows = (
        _inside_hours(tenant_id, Q(hour__gte=first_hour, hour__lt=end, node__allocation_memberships__id__in=ids))
        .annotate(kg_per_kwh=intensity)
        .filter(kg_per_kwh__isnull=False)
        .values(membership=F("node__allocation_memberships__id"), month=TruncMonth("hour"))
        .annotate(
            joules=Sum("it_energy_j"),
            weighted=Sum(
                ExpressionWrapper(
                    F("it_energy_j") * F("kg_per_kwh"), output_field=DecimalField(max_digits=30, decimal_places=4)
                )
            ),
        )
        .order_by()
    )
    for r in rows:
        cell = out[(r["membership"], _month(r["month"]))]
        cell[0] += Decimal(r["joules"] or 0)
        cell[1] += Decimal(r["weighted"] or 0)
    edge_sites = {(memberships[r["membership"]]["site_id"], r["hour"]) for r in edge_rows}
    if edge_sites:
        hours = dict(
            ((site, hour), kg)
            for site, hour, kg in profile.filter(hour__in={h for _, h in edge_sites}).values_list(
                "site_id", "hour", "kg_co2e_per_kwh"
            )
        )
        for r in edge_rows:
            kg = hours.get((memberships[r["membership"]]["site_id"], r["hour"]))
            if kg is not None:
                cell = out[(r["membership"], _month(r["hour"]))]
                cell[0] += r["joules"]
                cell[1] += r["joules"] * kg
    return out


def _rows(memberships: dict, energy: dict, profiled: dict, start: datetime, end: datetime) -> list[AllocationEnergy]:
    out: dict[tuple, AllocationEnergy] = {}

    def row_for(m, month: str) -> AllocationEnergy:
        key = (m["allocation_id"], month)
        if key not in out:
            out[key] = AllocationEnergy(
                allocation_id=m["allocation_id"], allocation_name=m["allocation__name"], month=month
            )
        return out[key]

    for (membership_id, month), by_source in energy.items():
        m = memberships[membership_id]
        row = row_for(m, month)
        total_j = Decimal(0)
        for source, (joules, seconds) in by_source.items():
            kwh = joules / J_PER_KWH
            row.it_kwh += kwh
            if source == "estimate":
                row.estimated_kwh += kwh
            else:
                row.measured_kwh += kwh
            row.covered_seconds += seconds
            total_j += joules
        profiled_j, weighted = profiled.get((membership_id, month), (Decimal(0), Decimal(0)))
        profiled_j = min(profiled_j, total_j)
        facility = total_j / J_PER_KWH * m["pue"]
        row.facility_kwh += facility
        row.profiled_kwh += profiled_j / J_PER_KWH * m["pue"]
        row.kg_co2e += (weighted / J_PER_KWH + (total_j - profiled_j) / J_PER_KWH * m["intensity"]) * m["pue"]
        row.energy_cost += facility * m["price"]

    for m in memberships.values():
        held_from = max(m["started_at"], start)
        held_to = min(m["ended_at"] or end, end)
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
        row.profiled_kwh = row.profiled_kwh.quantize(KWH)
        row.kg_co2e = row.kg_co2e.quantize(KG)
        row.energy_cost = row.energy_cost.quantize(CENT)
        row.gpu_hours = row.gpu_hours.quantize(KWH)
    return sorted(out.values(), key=lambda r: (r.month, r.allocation_name, str(r.allocation_id)))


def tenants_with_energy(*, start: datetime, end: datetime) -> list:
    """Ids of the tenants whose allocations held nodes at some time in [start, end): the tenants
    an energy line may be due for. One query."""
    return list(
        AllocationNode.objects.filter(started_at__lt=end)
        .filter(Q(ended_at__isnull=True) | Q(ended_at__gt=start))
        .values_list("allocation__tenant_id", flat=True)
        .distinct()
        .order_by("allocation__tenant_id")
    )


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
