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


# ---- end of life -----------------------------------------------------------------------------

def sanitized_drive_ids(drive_ids) -> set:
    """The drives among `drive_ids` that have a passing (verified) sanitisation record."""
    from .models import SanitizationRecord

    return set(SanitizationRecord.objects.filter(drive_id__in=list(drive_ids), verified=True)
               .values_list("drive_id", flat=True).distinct())


@dataclass(frozen=True)
class DataHandlingStatus:
    """Where a node stands on everything that gates it leaving (retire, dispose)."""

    drives_total: int
    drives_sanitized: int
    unsanitized: list[dict]  # [{"id", "serial"}] of drives without a passing record
    bmc_reset_at: object
    asset_tags_removed_at: object
    custody_transfers: int

    @property
    def drives_done(self) -> bool:
        return self.drives_sanitized == self.drives_total

    @property
    def retire_missing(self) -> list[str]:
        missing = [f"drive {d['serial']} has no passing sanitisation record" for d in self.unsanitized]
        if self.bmc_reset_at is None:
            missing.append("BMC reset (credentials reset, logs cleared) not recorded")
        return missing

    @property
    def dispose_missing(self) -> list[str]:
        missing = []
        if self.asset_tags_removed_at is None:
            missing.append("asset tags not recorded as removed")
        if not self.custody_transfers:
            missing.append("no chain-of-custody transfer recorded")
        return missing


def data_handling_status(node_ids) -> dict:
    """node id → DataHandlingStatus, in four queries whatever the number of nodes."""
    from .models import CustodyTransfer, Drive, NodeDisposal

    node_ids = list(node_ids)
    drives = list(Drive.objects.filter(node_id__in=node_ids).order_by("serial").values("id", "serial", "node_id"))
    passed = sanitized_drive_ids(d["id"] for d in drives)
    disposals = {d.node_id: d for d in NodeDisposal.objects.filter(node_id__in=node_ids)}
    custody = dict(CustodyTransfer.objects.filter(node_id__in=node_ids).values("node_id")
                   .annotate(n=Count("id")).values_list("node_id", "n"))
    per_node: dict = {nid: [] for nid in node_ids}
    for d in drives:
        per_node[d["node_id"]].append(d)
    out = {}
    for nid in node_ids:
        ds = per_node[nid]
        disposal = disposals.get(nid)
        out[nid] = DataHandlingStatus(
            drives_total=len(ds),
            drives_sanitized=sum(1 for d in ds if d["id"] in passed),
            unsanitized=[{"id": str(d["id"]), "serial": d["serial"]} for d in ds if d["id"] not in passed],
            bmc_reset_at=disposal.bmc_reset_at if disposal else None,
            asset_tags_removed_at=disposal.asset_tags_removed_at if disposal else None,
            custody_transfers=custody.get(nid, 0),
        )
    return out


def certificate_for(node_id) -> dict:
    """Everything the certificate of sanitisation shows: the node, each drive with its latest
    passing record, the BMC reset. Raises Node.DoesNotExist."""
    from .models import Drive, NodeDisposal, SanitizationRecord

    node = Node.objects.select_related("node_type", "rack__hall__site").get(pk=node_id)
    drives = list(Drive.objects.filter(node=node).order_by("serial"))
    latest: dict = {}
    for record in SanitizationRecord.objects.filter(drive__node=node, verified=True).order_by("performed_at", "id"):
        latest[record.drive_id] = record  # the latest passing record per drive wins
    disposal = NodeDisposal.objects.filter(node=node).first()
    status = data_handling_status([node.pk])[node.pk]
    return {"node": node, "rows": [(d, latest.get(d.pk)) for d in drives], "disposal": disposal,
            "status": status, "complete": not status.retire_missing}
