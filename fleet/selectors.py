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
