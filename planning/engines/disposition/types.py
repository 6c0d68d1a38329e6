"""What the disposition valuation takes and answers: options, assumptions, outgoing blocks,
internal demand, option values, allocations and the recommendation. Money is ``Decimal``,
rounded to cents only at presentation (``to_cents``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import ROUND_HALF_EVEN, Decimal
from enum import Enum
from typing import TypeVar

T = TypeVar("T")

HOURS_PER_MONTH = Decimal("730")  # 8,760 h / 12: the convention rental prices are quoted against
CENT = Decimal("0.01")


class Option(str, Enum):
    """The four disposition options, in the fixed order used to break ties.

    Redeploy comes first because keeping known hardware inside the business is
    the cheapest, lowest-risk use; recycle comes last because it is final.
    """

    REDEPLOY = "redeploy"
    LEASE = "lease"
    RESALE = "resale"
    RECYCLE = "recycle"


OPTION_ORDER: tuple[Option, ...] = tuple(Option)


@dataclass(frozen=True)
class PriceRange:
    """A low-high range as the market reports it (USD per GPU-hour)."""

    low: Decimal
    high: Decimal


@dataclass(frozen=True)
class Assumptions:
    """Every number the valuation uses, each with where it came from.

    ``sources`` maps each field name to a human-readable citation so the console
    can show why a default is what it is. Fields loaded from the reference CSVs
    cite the file, row and the CSV's own source; the rest are stated
    assumptions and say so. Mappings are keyed by GPU family (``"h100"``...),
    see ``gpu_family``.
    """

    rental_per_gpu_hour: Mapping[str, PriceRange]
    lease_discount: Decimal
    lease_utilisation: Decimal
    rental_breakeven_per_gpu_hour: Mapping[str, Decimal]
    resale_curve: tuple[Decimal, ...]
    channel_factors: Mapping[str, Decimal]
    new_price_per_gpu: Mapping[str, Decimal]
    months_until_sale: Decimal
    electricity_usd_per_kwh: Decimal
    pue: Decimal
    all_in_kw_per_gpu: Decimal
    sanitisation_cost_per_drive: Decimal
    logistics_cost_per_node: Decimal
    operations_cost_per_node_month: Decimal
    space_cost_per_rack_month: Decimal
    recycle_value_per_node: Decimal
    freed_power_value_per_kw_month: Decimal
    useful_life_years: Decimal
    sources: Mapping[str, str] = field(default_factory=dict)
    # Physical service life: how long a node can keep earning (accounting life only sets the books).
    service_life_years: Decimal = Decimal(7)
    # Per family: IT kW per GPU (generations.csv) scaled to all-in like all_in_kw_per_gpu.
    kw_per_gpu: Mapping[str, Decimal] = field(default_factory=dict)
    # Nameplate kW per GPU (generations.csv): the unit the migration planner frees and reuses.
    nameplate_kw_per_gpu: Mapping[str, Decimal] = field(default_factory=dict)
    # kW-months the linked migration reuses per kW its drained nodes free, within the horizon.
    freed_kw_months_per_kw: Decimal = Decimal(0)
    # Leases are contracts billed every hour; utilisation applies only to on-demand leasing.
    lease_on_demand: bool = False
    # Rank by cash (default) or by cash + freed power.
    rank_with_freed_power: bool = False


@dataclass(frozen=True)
class OutgoingBlock:
    """A homogeneous group of nodes leaving service together.

    ``node_kw`` is the node's all-in IT draw; when ``None`` it is
    ``gpus_per_node`` x ``Assumptions.all_in_kw_per_gpu``, which includes the
    host and its share of storage and fabric, i.e. everything that goes dark
    when the node leaves.
    """

    generation: str
    gpu_model: str
    gpus_per_node: int
    nodes: int
    age_years: Decimal
    hall: str
    nodes_per_rack: int
    drives_per_node: int
    node_kw: Decimal | None = None
    # Coherence with a linked migration plan: nodes it drains cannot be kept in place (no lease,
    # no redeploy where they stand); nodes it keeps in a hall it refills are charged, in kept
    # options, the colocation rent of their kW from ``blocked_from_month`` (the plan's first new
    # rack in that hall) on; ``group`` names the class in the label, ``coherence``
    # says in words what the plan does with these nodes.
    kept_in_place: bool = True
    blocked_from_month: Decimal | None = None
    group: str = ""
    coherence: str = ""

    @property
    def label(self) -> str:
        base = f"{self.gpu_model} in {self.hall}"
        return f"{base} ({self.group})" if self.group else base


@dataclass(frozen=True)
class InternalDemand:
    """A pool inside the business that would take outgoing nodes.

    ``value_per_gpu_hour`` is what a busy GPU-hour is worth to the business:
    revenue it enables or the rental it avoids. ``horizon_months`` is how long
    the pool needs the nodes; after that they are sold.
    """

    pool: str
    nodes_wanted: int
    value_per_gpu_hour: Decimal
    utilisation: Decimal
    horizon_months: int


@dataclass(frozen=True)
class OptionValue:
    """Return of one option for one node over the horizon, with its parts.

    ``cash`` = ``operating_margin`` + ``disposal_proceeds`` + ``residual_value``;
    ``freed_power_value`` is opportunity, not cash. ``return_per_node`` is what the
    split ranks by: ``cash``, plus ``freed_power_value`` only when the operator opted in.
    """

    option: Option
    return_per_node: Decimal
    operating_margin: Decimal
    disposal_proceeds: Decimal
    residual_value: Decimal
    freed_power_value: Decimal
    service_months: Decimal
    cash: Decimal = Decimal(0)
    # Month the lease starts (after the ramp and the earlier tranches) or extra months a sale
    # waits for market depth; 0 for redeploy, a first sale and recycle.
    start_month: int = 0
    # Kept options in a hall a linked migration refills: the colocation rent of the kW held
    # there while kept, charged in the ranking (not cash).
    blocked_value: Decimal = Decimal(0)


@dataclass(frozen=True)
class OptionValues:
    """The four options for one node of a block; ``redeploy`` is ``None``
    when no internal demand was given."""

    redeploy: OptionValue | None
    lease: OptionValue
    resale: OptionValue
    recycle: OptionValue

    def available(self) -> tuple[OptionValue, ...]:
        """The options that exist for this node, in tie-break order."""
        values = (self.redeploy, self.lease, self.resale, self.recycle)
        return tuple(v for v in values if v is not None)


@dataclass(frozen=True)
class Tranche:
    """Nodes of one allocation that share a start month, and so a value per node."""

    nodes: int
    value: OptionValue

    @property
    def total_return(self) -> Decimal:
        return self.value.return_per_node * self.nodes


@dataclass(frozen=True)
class Allocation:
    """Nodes of one block sent to one option (and pool, for redeploy), in tranches by month
    where a market bound spreads them out, with the constraint that decided them."""

    block_label: str
    option: Option
    pool: str | None
    nodes: int
    value: OptionValue  # the first tranche's value per node
    tranches: tuple[Tranche, ...] = ()
    decided_by: str = "best_return"  # best_return, pool:<name>, lease_market, lease_cap, resale_depth, migration_drain
    reason: str = ""

    def _parts(self) -> tuple[Tranche, ...]:
        return self.tranches or (Tranche(self.nodes, self.value),)

    @property
    def total_return(self) -> Decimal:
        return sum((t.total_return for t in self._parts()), Decimal(0))

    @property
    def total_cash(self) -> Decimal:
        return sum((t.value.cash * t.nodes for t in self._parts()), Decimal(0))

    @property
    def total_freed_power_value(self) -> Decimal:
        return sum((t.value.freed_power_value * t.nodes for t in self._parts()), Decimal(0))

    @property
    def total_blocked_value(self) -> Decimal:
        return sum((t.value.blocked_value * t.nodes for t in self._parts()), Decimal(0))


@dataclass(frozen=True)
class DispositionRecommendation:
    """The split, its money, and the sentences that justify it."""

    horizon_months: int
    channel: str
    allocations: tuple[Allocation, ...]
    node_counts: Mapping[Option, int]
    option_returns: Mapping[Option, Decimal]
    total_return: Decimal
    reasoning: tuple[str, ...]
    total_cash: Decimal = Decimal(0)
    total_freed_power_value: Decimal = Decimal(0)


def to_cents(amount: Decimal) -> Decimal:
    """Round for presentation only; internal sums stay unrounded."""
    return amount.quantize(CENT, rounding=ROUND_HALF_EVEN)


def usd(amount: Decimal) -> str:
    """``1234.5`` -> ``'1,234.50 USD'``."""
    return f"{to_cents(amount):,.2f} USD"


def gpu_family(gpu_model: str) -> str:
    """``'H100-SXM5-80GB'`` -> ``'h100'``: the key prices are reported under."""
    return gpu_model.split("-", 1)[0].lower()
