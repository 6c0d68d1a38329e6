"""Disposition valuation: what to do with outgoing GPU nodes, and why.

When a generation is replaced, the old nodes are worth most in different places:
some earn more serving internal pools, some as a cheaper leased SKU, some sold on
the secondary market, a few only as scrap. This module scores the four options
per node over a horizon and splits the outgoing fleet between them.

It is pure and deterministic (no Django, no database, no clock) so the Django
layer can call it from a view, a task or a test and always get the same answer
for the same inputs. Money is ``Decimal`` throughout and rounded to cents only
at presentation (``to_cents``), so sums of many nodes do not drift.

Two ideas shape every number here:

* Cash and opportunity are different things. Cash is what the option pays:
  operating margin, sale proceeds, residual value. Freed power is an
  opportunity: a kilowatt a leaving node frees is worth something only if the
  migration actually reuses it, only from when it does, and only once. It is
  valued at the wholesale colocation rent of a kilowatt (economics.csv), not at
  what new hardware would earn in it (that revenue needs capex the node's sale
  does not pay for), over ``freed_kw_months_per_kw``: the kW-months the linked
  migration plan reuses per kW its drained nodes free (0 without a link). It is
  reported apart (``freed_power_value``) and changes the ranking only when
  ``rank_with_freed_power`` is set.
* The options must be compared over the same horizon. A node kept for the
  horizon still has a market value at its end, so keep-options carry that
  residual value; without it redeployment would be charged the whole sale
  price it merely postpones.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_HALF_EVEN, Decimal
from enum import Enum
from pathlib import Path
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

    @property
    def label(self) -> str:
        return f"{self.gpu_model} in {self.hall}"


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
class Allocation:
    """Nodes of one block sent to one option (and pool, for redeploy)."""

    block_label: str
    option: Option
    pool: str | None
    nodes: int
    value: OptionValue

    @property
    def total_return(self) -> Decimal:
        return self.value.return_per_node * self.nodes


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


# --------------------------------------------------------------------------
# Reference data
# --------------------------------------------------------------------------


def _read_rows(path: Path, key: str) -> dict[str, dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as handle:
        return {row[key]: row for row in csv.DictReader(handle)}


def _cite(file: str, row: dict[str, str], name: str) -> str:
    as_of = f", {row['as_of']}" if row.get("as_of") else ""
    return f"{file} {name} = {row['value']} {row['unit']}: {row['source']}{as_of}"


def _range(text: str) -> tuple[Decimal, Decimal]:
    low, _, high = text.partition("-")
    return Decimal(low), Decimal(high or low)


def _midpoint(text: str) -> Decimal:
    low, high = _range(text)
    return (low + high) / 2


def resale_fraction(curve: Sequence[Decimal], age_years: Decimal) -> Decimal:
    """Fraction of new price at a fractional age, linear between whole years.

    The market data stops at 4 years, so older hardware is clamped to the last
    point rather than extrapolated into numbers nobody has observed.
    """
    if age_years <= 0:
        return curve[0]
    last = len(curve) - 1
    if age_years >= last:
        return curve[last]
    whole = int(age_years)
    frac = age_years - whole
    return curve[whole] + (curve[whole + 1] - curve[whole]) * frac


def freed_power_value_per_kw_month(
    rental_per_gpu_hour: Decimal,
    utilisation: Decimal,
    kw_per_gpu: Decimal,
    pue: Decimal,
    electricity_usd_per_kwh: Decimal,
) -> Decimal:
    """What one IT kilowatt earns per month when newer hardware fills it.

    Revenue of the GPUs that fit in a kilowatt minus that kilowatt's energy bill
    (facility energy, hence the PUE). This is the opportunity cost a node pays
    for staying powered; it assumes the site is power-bound, which is why it is
    a plain field the caller can set to zero for a hall with spare power.
    """
    revenue = rental_per_gpu_hour * utilisation * HOURS_PER_MONTH / kw_per_gpu
    energy = pue * electricity_usd_per_kwh * HOURS_PER_MONTH
    return revenue - energy


# Stated assumptions: not in the reference CSVs, each documented in
# docs/planning.md and cited in Assumptions.sources.
_LEASE_DISCOUNT = Decimal("0.90")
_LEASE_UTILISATION = Decimal("0.6")
_REPLACEMENT_UTILISATION = Decimal("0.6")
_TYPICAL_RESALE_AGE_YEARS = Decimal("2")
_MONTHS_UNTIL_SALE = Decimal("2")
_SANITISATION_PER_DRIVE = Decimal("25")
_LOGISTICS_PER_NODE = Decimal("500")
_OPERATIONS_PER_NODE_MONTH = Decimal("150")
_SPACE_PER_RACK_MONTH = Decimal("400")
_RECYCLE_PER_NODE = Decimal("300")
_SERVICE_LIFE_YEARS = Decimal("7")


def load_default_assumptions(reference_dir: Path) -> Assumptions:
    """Build the defaults from ``economics.csv``, ``facility.csv`` and
    ``generations.csv`` in ``reference_dir``.

    Numbers are read, never retyped, so a corrected CSV corrects the valuation;
    derived numbers cite every row they come from.
    """
    econ = _read_rows(reference_dir / "economics.csv", "parameter")
    fac = _read_rows(reference_dir / "facility.csv", "parameter")
    gens = _read_rows(reference_dir / "generations.csv", "gpu_model")
    sources: dict[str, str] = {}

    rental: dict[str, PriceRange] = {}
    rental_cites = []
    for name, family in (
        ("rental_a100_80gb", "a100"),
        ("rental_h100", "h100"),
        ("rental_h200", "h200"),
        ("rental_b200", "b200"),
    ):
        low, high = _range(econ[name]["value"])
        rental[family] = PriceRange(low, high)
        rental_cites.append(_cite("economics.csv", econ[name], name))
    sources["rental_per_gpu_hour"] = "; ".join(rental_cites)

    sources["lease_discount"] = (
        f"assumption: a cheaper SKU is leased at {_LEASE_DISCOUNT} x the low end of "
        "its generation's rental range (older hardware, shorter commitments)"
    )
    sources["lease_utilisation"] = (
        f"assumption: {_LEASE_UTILISATION} of hours billed for a leased older SKU when leased on demand; "
        "a contracted lease bills every hour at the contracted rate, so it is not applied there"
    )

    sources["rental_breakeven_per_gpu_hour"] = _cite(
        "economics.csv", econ["rental_h100_breakeven"], "rental_h100_breakeven"
    )
    breakeven = {"h100": Decimal(econ["rental_h100_breakeven"]["value"])}

    curve_row = econ["resale_curve_by_age_years"]
    curve = tuple(Decimal(p) for p in curve_row["value"].split(","))
    sources["resale_curve"] = _cite("economics.csv", curve_row, "resale_curve_by_age_years")

    channel_row = econ["resale_channel_factor"]
    channels = {}
    for part in channel_row["value"].split(","):
        name, value = part.split()
        channels[name] = Decimal(value)
    sources["channel_factors"] = _cite("economics.csv", channel_row, "resale_channel_factor")

    typical = resale_fraction(curve, _TYPICAL_RESALE_AGE_YEARS)
    new_price = {}
    price_cites = []
    for name, family in (("resale_used_h100_sxm", "h100"), ("resale_used_a100", "a100")):
        new_price[family] = _midpoint(econ[name]["value"]) / typical
        price_cites.append(_cite("economics.csv", econ[name], name))
    sources["new_price_per_gpu"] = (
        f"derived: midpoint of the used-price range / resale curve at a typical "
        f"secondary-market age of {_TYPICAL_RESALE_AGE_YEARS} years (assumption, "
        f"{typical}); " + "; ".join(price_cites)
    )

    sources["months_until_sale"] = (
        f"assumption: {_MONTHS_UNTIL_SALE} months from decision to sale (drain, sanitise, list, ship)"
    )

    electricity = Decimal(econ["electricity_price"]["value"])
    sources["electricity_usd_per_kwh"] = _cite("economics.csv", econ["electricity_price"], "electricity_price")
    pue = Decimal(fac["pue_industry_average"]["value"])
    sources["pue"] = _cite("facility.csv", fac["pue_industry_average"], "pue_industry_average")
    all_in = Decimal(fac["all_in_kw_per_h100_gpu"]["value"])
    sources["all_in_kw_per_gpu"] = _cite("facility.csv", fac["all_in_kw_per_h100_gpu"], "all_in_kw_per_h100_gpu")

    sources["sanitisation_cost_per_drive"] = (
        f"assumption: {_SANITISATION_PER_DRIVE} USD per drive for a NIST SP 800-88 "
        "purge or destroy with verification and record, labour included"
    )
    sources["logistics_cost_per_node"] = f"assumption: {_LOGISTICS_PER_NODE} USD per node to de-rack, pack and ship"
    sources["operations_cost_per_node_month"] = (
        f"assumption: {_OPERATIONS_PER_NODE_MONTH} USD per node-month for remote hands, "
        "monitoring and support share of a node kept in service"
    )
    sources["space_cost_per_rack_month"] = (
        f"assumption: {_SPACE_PER_RACK_MONTH} USD per rack-month of floor and cooling "
        "plant, energy excluded (energy is priced separately)"
    )
    sources["recycle_value_per_node"] = f"assumption: {_RECYCLE_PER_NODE} USD per node from an e-waste recycler"

    # Freed power: the wholesale rent of a kilowatt, i.e. what the kW is worth to whoever gets it.
    # Not new hardware's margin in it: that needs the new hardware's capex, which selling the
    # old node does not pay.
    colo = econ["colocation_wholesale_kw_month"]
    freed = Decimal(colo["value"])
    sources["freed_power_value_per_kw_month"] = (
        "wholesale colocation rent of a kW (not new capacity's margin, which needs its capex): "
        + _cite("economics.csv", colo, "colocation_wholesale_kw_month")
    )
    sources["freed_kw_months_per_kw"] = (
        "from the linked migration plan: kW-months it reuses (new racks' draw beyond the hall's spare power, "
        "up to what drains free) per kW it frees; 0 when no migration plan is linked"
    )
    h100 = gens["H100-SXM5-80GB"]
    h100_nameplate_per_gpu = Decimal(h100["node_kw"]) / Decimal(h100["gpus_per_node"])
    all_in_factor = all_in / h100_nameplate_per_gpu
    kw_per_gpu: dict[str, Decimal] = {}
    nameplate: dict[str, Decimal] = {}
    for model, row in gens.items():
        if row["node_kw"]:
            per_gpu = Decimal(row["node_kw"]) / Decimal(row["gpus_per_node"])
        else:
            per_gpu = Decimal(row["rack_kw_typical"]) / Decimal(row["nvlink_domain_gpus"])
        nameplate[gpu_family(model)] = per_gpu
        kw_per_gpu[gpu_family(model)] = per_gpu * all_in_factor
    sources["kw_per_gpu"] = (
        "generations.csv node kW / GPUs per node (rack kW / NVLink domain for rack-scale) per family, scaled by "
        f"facility.csv all_in_kw_per_h100_gpu / the H100's nameplate {h100_nameplate_per_gpu} kW "
        "(host, storage and fabric share)"
    )
    sources["nameplate_kw_per_gpu"] = "generations.csv node kW / GPUs per node, per family"
    sources["service_life_years"] = (
        f"assumption: {_SERVICE_LIFE_YEARS} years of physical service; A100s from 2020 still rent in 2026 "
        "(economics.csv rental_a100_80gb), so a node past its accounting life keeps earning"
    )
    sources["lease_on_demand"] = "operator choice: false = contracted lease billed every hour"
    sources["rank_with_freed_power"] = "operator choice: false = the split ranks options by cash"

    life_row = econ["useful_life"]
    sources["useful_life_years"] = (
        "accounting life (depreciation; reported, does not end service): midpoint of "
        + _cite("economics.csv", life_row, "useful_life")
    )

    return Assumptions(
        rental_per_gpu_hour=rental,
        lease_discount=_LEASE_DISCOUNT,
        lease_utilisation=_LEASE_UTILISATION,
        rental_breakeven_per_gpu_hour=breakeven,
        resale_curve=curve,
        channel_factors=channels,
        new_price_per_gpu=new_price,
        months_until_sale=_MONTHS_UNTIL_SALE,
        electricity_usd_per_kwh=electricity,
        pue=pue,
        all_in_kw_per_gpu=all_in,
        sanitisation_cost_per_drive=_SANITISATION_PER_DRIVE,
        logistics_cost_per_node=_LOGISTICS_PER_NODE,
        operations_cost_per_node_month=_OPERATIONS_PER_NODE_MONTH,
        space_cost_per_rack_month=_SPACE_PER_RACK_MONTH,
        recycle_value_per_node=_RECYCLE_PER_NODE,
        freed_power_value_per_kw_month=freed,
        useful_life_years=_midpoint(life_row["value"]),
        sources=sources,
        service_life_years=_SERVICE_LIFE_YEARS,
        kw_per_gpu=kw_per_gpu,
        nameplate_kw_per_gpu=nameplate,
    )


# --------------------------------------------------------------------------
# Valuation per node
# --------------------------------------------------------------------------


def node_kw(block: OutgoingBlock, a: Assumptions) -> Decimal:
    """All-in IT kilowatts one node of the block draws (and frees when it leaves)."""
    if block.node_kw is not None:
        return block.node_kw
    per_gpu = a.kw_per_gpu.get(gpu_family(block.gpu_model), a.all_in_kw_per_gpu)
    return per_gpu * block.gpus_per_node


def freed_kw(block: OutgoingBlock, a: Assumptions) -> Decimal:
    """Nameplate kW one node frees, in the migration planner's unit (generations.csv)."""
    per_gpu = a.nameplate_kw_per_gpu.get(gpu_family(block.gpu_model))
    return per_gpu * block.gpus_per_node if per_gpu is not None else node_kw(block, a)


def _freed_value(block: OutgoingBlock, a: Assumptions, service_months: Decimal, horizon: Decimal) -> Decimal:
    """Opportunity value of the node's kW: reused kW-months per freed kW (from the migration plan),
    less the months the node itself still holds them, at the colocation rate."""
    months = min(horizon, max(Decimal(0), a.freed_kw_months_per_kw - service_months))
    return freed_kw(block, a) * a.freed_power_value_per_kw_month * months


def lease_price_per_gpu_hour(block: OutgoingBlock, a: Assumptions) -> Decimal:
    """The cheaper-SKU price: the low end of the generation's range, discounted."""
    return _lookup(a.rental_per_gpu_hour, block, "rental price").low * a.lease_discount


def _lookup(table: Mapping[str, T], block: OutgoingBlock, what: str) -> T:
    family = gpu_family(block.gpu_model)
    if family not in table:
        raise ValueError(f"no {what} for {block.gpu_model!r} (family {family!r}); pass one in Assumptions")
    return table[family]


def _running_cost_per_month(block: OutgoingBlock, a: Assumptions) -> Decimal:
    """Energy, floor space and operations of one node kept powered for a month."""
    energy = node_kw(block, a) * a.pue * a.electricity_usd_per_kwh * HOURS_PER_MONTH
    space = a.space_cost_per_rack_month / block.nodes_per_rack
    return energy + space + a.operations_cost_per_node_month


def _exit_costs(block: OutgoingBlock, a: Assumptions) -> Decimal:
    """Every leaving node pays for drive sanitisation (no node leaves without a
    record per drive) and for logistics, whether sold or scrapped."""
    return a.sanitisation_cost_per_drive * block.drives_per_node + a.logistics_cost_per_node


def _sale_net(block: OutgoingBlock, a: Assumptions, age_years: Decimal, channel: str) -> Decimal:
    """Net proceeds of selling one node at ``age_years`` (sale happens
    ``months_until_sale`` later, so the buyer pays for an older node)."""
    new_price = _lookup(a.new_price_per_gpu, block, "new price")
    sale_age = age_years + a.months_until_sale / 12
    gross = new_price * block.gpus_per_node * resale_fraction(a.resale_curve, sale_age)
    return gross * a.channel_factors[channel] - _exit_costs(block, a)


def _recycle_net(block: OutgoingBlock, a: Assumptions) -> Decimal:
    return a.recycle_value_per_node - _exit_costs(block, a)


def _keep_option(
    option: Option,
    block: OutgoingBlock,
    a: Assumptions,
    horizon: Decimal,
    service_limit: Decimal,
    revenue_per_month: Decimal,
    channel: str,
) -> OptionValue:
    """A node kept in service, then disposed of at the better of sale or scrap.

    Service stops at the horizon, at the end of the demand, or at the end of
    useful life, whichever is first; from then to the horizon its kilowatts
    are freed for newer hardware.
    """
    remaining_life = max(Decimal(0), (a.service_life_years - block.age_years) * 12)
    service = min(horizon, service_limit, remaining_life)
    margin = (revenue_per_month - _running_cost_per_month(block, a)) * service
    end_age = block.age_years + service / 12
    residual = max(_sale_net(block, a, end_age, channel), _recycle_net(block, a))
    freed = _freed_value(block, a, service, horizon)
    cash = margin + residual
    ranked = cash + freed if a.rank_with_freed_power else cash
    return OptionValue(option, ranked, margin, Decimal(0), residual, freed, service, cash)


def _leave_option(
    option: Option, proceeds: Decimal, block: OutgoingBlock, a: Assumptions, horizon: Decimal
) -> OptionValue:
    freed = _freed_value(block, a, Decimal(0), horizon)
    ranked = proceeds + freed if a.rank_with_freed_power else proceeds
    return OptionValue(option, ranked, Decimal(0), proceeds, Decimal(0), freed, Decimal(0), proceeds)


def value_options(
    block: OutgoingBlock,
    demand: InternalDemand | None,
    assumptions: Assumptions,
    horizon_months: int,
    channel: str = "broker",
) -> OptionValues:
    """Return per node of each option over ``horizon_months``.

    ``channel`` is the resale channel, used both for selling now and for the
    residual value of kept nodes. Redeploy is ``None`` without a demand.
    """
    a = assumptions
    if channel not in a.channel_factors:
        raise ValueError(f"unknown resale channel {channel!r}; known: {sorted(a.channel_factors)}")
    if horizon_months <= 0:
        raise ValueError("horizon_months must be positive")
    horizon = Decimal(horizon_months)
    gpu_hours = block.gpus_per_node * HOURS_PER_MONTH

    redeploy = None
    if demand is not None:
        revenue = demand.value_per_gpu_hour * demand.utilisation * gpu_hours
        redeploy = _keep_option(Option.REDEPLOY, block, a, horizon, Decimal(demand.horizon_months), revenue, channel)
    billed = a.lease_utilisation if a.lease_on_demand else Decimal(1)
    lease_revenue = lease_price_per_gpu_hour(block, a) * billed * gpu_hours
    lease = _keep_option(Option.LEASE, block, a, horizon, horizon, lease_revenue, channel)
    resale = _leave_option(Option.RESALE, _sale_net(block, a, block.age_years, channel), block, a, horizon)
    recycle = _leave_option(Option.RECYCLE, _recycle_net(block, a), block, a, horizon)
    return OptionValues(redeploy, lease, resale, recycle)


def _best(values: Iterable[OptionValue]) -> OptionValue:
    """Highest return; on a tie the earlier option in ``OPTION_ORDER`` wins."""
    return max(values, key=lambda v: (v.return_per_node, -OPTION_ORDER.index(v.option)))


# --------------------------------------------------------------------------
# The split
# --------------------------------------------------------------------------


def recommend_split(
    blocks: Sequence[OutgoingBlock],
    demands: Sequence[InternalDemand],
    assumptions: Assumptions,
    horizon_months: int,
    channel: str = "broker",
    lease_cap_nodes: int | None = None,
) -> DispositionRecommendation:
    """Split the outgoing nodes between the four options.

    Order matters and is the policy: internal demand is served first (the pool
    with the highest redeploy return first), taking a node only when redeploying it returns at
    least as much as the best thing the node could do outside. Leasing then
    takes what it beats selling for, up to ``lease_cap_nodes`` (``None``: the
    market takes all). The rest is sold or recycled, whichever returns more.
    Blocks are visited best-return first within each step, input order on ties,
    so the result is deterministic.
    """
    a = assumptions
    remaining = [b.nodes for b in blocks]
    external = [value_options(b, None, a, horizon_months, channel) for b in blocks]
    allocations: list[Allocation] = []
    reasoning: list[str] = []
    horizon_text = f"over {horizon_months} months"
    lease_slots = lease_cap_nodes  # lease capacity not yet promised; None is unlimited
    held = [0 for _ in blocks]  # nodes promised to the lease step, out of reach of later pools

    by_demand = [(d, [value_options(b, d, a, horizon_months, channel) for b in blocks]) for d in demands]
    # Highest value first, measured as the best redeploy return the pool offers
    # any block: a pool's price per GPU-hour alone ignores its utilisation and
    # how long it needs the nodes.
    by_demand.sort(key=lambda dv: (-max((v.redeploy.return_per_node for v in dv[1]), default=0), dv[0].pool))
    for demand, values in by_demand:
        wanted = demand.nodes_wanted
        order = sorted(range(len(blocks)), key=lambda i: (-values[i].redeploy.return_per_node, i))
        for i in order:
            take = min(wanted, remaining[i] - held[i])
            if take <= 0:
                continue
            redeploy = values[i].redeploy
            disposal = _best((external[i].resale, external[i].recycle))
            lease = external[i].lease
            if redeploy.return_per_node < disposal.return_per_node:
                reasoning.append(
                    f"Do not redeploy {blocks[i].label} to {demand.pool}: "
                    f"{usd(redeploy.return_per_node)}/node {horizon_text} is below "
                    f"{disposal.option.value} at {usd(disposal.return_per_node)}/node."
                )
                continue
            if lease.return_per_node > redeploy.return_per_node and lease_slots != 0:
                keep = take if lease_slots is None else min(take, lease_slots)
                lease_slots = None if lease_slots is None else lease_slots - keep
                held[i] += keep
                take -= keep
                reasoning.append(
                    f"Keep {keep} nodes of {blocks[i].label} for leasing rather than {demand.pool}: "
                    f"lease returns {usd(lease.return_per_node)}/node {horizon_text}, "
                    f"redeploy {usd(redeploy.return_per_node)}/node."
                )
            if take == 0:
                continue
            best_external = _best((lease, disposal)) if lease_slots != 0 else disposal
            remaining[i] -= take
            wanted -= take
            allocations.append(Allocation(blocks[i].label, Option.REDEPLOY, demand.pool, take, redeploy))
            reasoning.append(
                f"Redeploy {take} nodes of {blocks[i].label} to {demand.pool}: "
                f"{usd(redeploy.return_per_node)}/node {horizon_text} beats "
                f"{best_external.option.value} at {usd(best_external.return_per_node)}/node."
            )
        if wanted > 0 and wanted < demand.nodes_wanted:
            reasoning.append(f"{demand.pool} stays {wanted} nodes short of the {demand.nodes_wanted} it asked for.")

    lease_left = lease_cap_nodes
    order = sorted(
        range(len(blocks)),
        key=lambda i: (
            -(external[i].lease.return_per_node - _best((external[i].resale, external[i].recycle)).return_per_node),
            i,
        ),
    )
    for i in order:
        if remaining[i] == 0:
            continue
        lease = external[i].lease
        disposal = _best((external[i].resale, external[i].recycle))
        if lease.return_per_node < disposal.return_per_node:
            reasoning.append(
                f"Do not lease {blocks[i].label}: {usd(lease.return_per_node)}/node {horizon_text} "
                f"is below {disposal.option.value} at {usd(disposal.return_per_node)}/node."
            )
            continue
        take = remaining[i] if lease_left is None else min(remaining[i], lease_left)
        if take == 0:
            reasoning.append(f"The lease market is full ({lease_cap_nodes} nodes); {blocks[i].label} is not leased.")
            continue
        lease_left = None if lease_left is None else lease_left - take
        remaining[i] -= take
        allocations.append(Allocation(blocks[i].label, Option.LEASE, None, take, lease))
        price = lease_price_per_gpu_hour(blocks[i], a)
        billing = (
            f"{a.lease_utilisation:.0%} utilisation (on demand)"
            if a.lease_on_demand
            else "a contract billed every hour"
        )
        reasoning.append(
            f"Lease {take} nodes of {blocks[i].label} as a cheaper SKU at "
            f"{to_cents(price)} USD/GPU-h on {billing}: "
            f"{usd(lease.return_per_node)}/node {horizon_text} beats "
            f"{disposal.option.value} at {usd(disposal.return_per_node)}/node."
        )
        breakeven = a.rental_breakeven_per_gpu_hour.get(gpu_family(blocks[i].gpu_model))
        if breakeven is not None and price < breakeven:
            reasoning.append(
                f"That price is below the {breakeven} USD/GPU-h breakeven of new "
                f"{blocks[i].gpu_model} capacity; it pays only because this hardware is already paid for."
            )

    for i, block in enumerate(blocks):
        if remaining[i] == 0:
            continue
        resale, recycle = external[i].resale, external[i].recycle
        chosen, other = (resale, recycle) if _best((resale, recycle)) is resale else (recycle, resale)
        allocations.append(Allocation(block.label, chosen.option, None, remaining[i], chosen))
        verb = (
            f"Sell {remaining[i]} nodes of {block.label} via {channel}"
            if chosen is resale
            else f"Recycle {remaining[i]} nodes of {block.label}"
        )
        reasoning.append(
            f"{verb}: {usd(chosen.cash)}/node cash {horizon_text} "
            f"(opportunity, apart: {usd(chosen.freed_power_value)} of reused power) "
            f"beats {other.option.value} at {usd(other.return_per_node)}/node."
        )
        remaining[i] = 0

    counts = {o: sum(al.nodes for al in allocations if al.option is o) for o in OPTION_ORDER}
    returns = {o: sum((al.total_return for al in allocations if al.option is o), Decimal(0)) for o in OPTION_ORDER}
    total = sum((al.total_return for al in allocations), Decimal(0))
    cash = sum((al.value.cash * al.nodes for al in allocations), Decimal(0))
    opportunity = sum((al.value.freed_power_value * al.nodes for al in allocations), Decimal(0))
    past_books = [b.label for b in blocks if b.age_years >= a.useful_life_years]
    if past_books:
        reasoning.append(
            f"{', '.join(past_books)} is past its {a.useful_life_years}-year accounting life: fully depreciated, "
            f"still in service up to its {a.service_life_years}-year physical life."
        )
    if a.freed_kw_months_per_kw > 0:
        reasoning.append(
            f"Freed power is opportunity, not cash: {usd(opportunity)} = the kW the migration reuses, from when it "
            f"reuses them ({a.freed_kw_months_per_kw:.2f} kW-months per freed kW), at "
            f"{usd(a.freed_power_value_per_kw_month)} per kW-month wholesale colocation rent; valued once."
        )
    else:
        reasoning.append("Freed power is not valued: no linked migration plan reuses these kilowatts.")
    ranked_by = "cash + freed power (operator opted in)" if a.rank_with_freed_power else "cash"
    reasoning.append(f"Options are ranked by {ranked_by}.")
    reasoning.append(
        f"Cash return {horizon_text}: {usd(cash)} for {sum(b.nodes for b in blocks)} nodes; "
        f"opportunity value of reused power, apart: {usd(opportunity)}."
    )
    return DispositionRecommendation(
        horizon_months=horizon_months,
        channel=channel,
        allocations=tuple(allocations),
        node_counts=counts,
        option_returns=returns,
        total_return=total,
        reasoning=tuple(reasoning),
        total_cash=cash,
        total_freed_power_value=opportunity,
    )
