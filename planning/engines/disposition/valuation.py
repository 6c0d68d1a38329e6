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

from collections.abc import Callable, Iterable, Mapping
from decimal import Decimal

from planning.engines.disposition.assumptions import (
    resale_fraction,
)
from planning.engines.disposition.market import Market
from planning.engines.disposition.types import (
    HOURS_PER_MONTH,
    OPTION_ORDER,
    Assumptions,
    InternalDemand,
    Option,
    OptionValue,
    OptionValues,
    OutgoingBlock,
    T,
    gpu_family,
)


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


def _idle_cost_per_month(block: OutgoingBlock, a: Assumptions) -> Decimal:
    """A node waiting, powered off in its position, for its lease or its buyer: floor space and
    operations, no energy."""
    return a.space_cost_per_rack_month / block.nodes_per_rack + a.operations_cost_per_node_month


def _blocked_value(block: OutgoingBlock, a: Assumptions, held_until: Decimal) -> Decimal:
    """What a node kept in place blocks in a hall a linked migration refills: the colocation
    rent of its kW from the plan's first new rack there until it leaves."""
    if block.blocked_from_month is None:
        return Decimal(0)
    months = max(Decimal(0), held_until - block.blocked_from_month)
    return freed_kw(block, a) * a.freed_power_value_per_kw_month * months


def _ranked(a: Assumptions, cash: Decimal, freed: Decimal, blocked: Decimal) -> Decimal:
    return (cash + freed if a.rank_with_freed_power else cash) - blocked


def _keep_option(
    option: Option,
    block: OutgoingBlock,
    a: Assumptions,
    horizon: Decimal,
    service_limit: Decimal,
    revenue: Callable[[int], Decimal],
    channel: str,
    start: int = 0,
) -> OptionValue:
    """A node kept in service from month ``start`` (idle before it), then disposed of at the
    better of sale or scrap.

    Service stops at the horizon, at the end of the demand, or at the end of its physical
    life, whichever is first; from then to the horizon its kilowatts are freed for newer
    hardware. ``revenue(t)`` is what month ``t`` (from now) earns.
    """
    remaining_life = max(Decimal(0), (a.service_life_years - block.age_years) * 12)
    end = min(horizon, service_limit, remaining_life)
    served = max(Decimal(0), end - start)
    whole = int(served)
    earned = sum((revenue(start + t) for t in range(whole)), Decimal(0))
    if served > whole:
        earned += revenue(start + whole) * (served - whole)
    idle = _idle_cost_per_month(block, a) * min(Decimal(start), end)
    margin = earned - _running_cost_per_month(block, a) * served - idle
    held_until = max(end, Decimal(start)) if served > 0 else Decimal(0)
    end_age = block.age_years + held_until / 12
    residual = max(_sale_net(block, a, end_age, channel), _recycle_net(block, a))
    freed = _freed_value(block, a, held_until, horizon)
    blocked = _blocked_value(block, a, held_until)
    cash = margin + residual
    return OptionValue(
        option, _ranked(a, cash, freed, blocked), margin, Decimal(0), residual, freed, served, cash, start, blocked
    )


def _leave_option(
    option: Option, proceeds: Decimal, block: OutgoingBlock, a: Assumptions, horizon: Decimal, wait: int = 0
) -> OptionValue:
    # A node waiting for its buyer waits off the floor: its kW are freed when it leaves service.
    freed = _freed_value(block, a, Decimal(0), horizon)
    return OptionValue(
        option,
        _ranked(a, proceeds, freed, Decimal(0)),
        Decimal(0),
        proceeds,
        Decimal(0),
        freed,
        Decimal(0),
        proceeds,
        wait,
    )


def redeploy_value(
    block: OutgoingBlock, demand: InternalDemand, a: Assumptions, horizon_months: int, channel: str = "broker"
) -> OptionValue:
    """One node serving an internal pool from now for the pool's horizon, then sold."""
    revenue = demand.value_per_gpu_hour * demand.utilisation * block.gpus_per_node * HOURS_PER_MONTH
    return _keep_option(
        Option.REDEPLOY, block, a, Decimal(horizon_months), Decimal(demand.horizon_months), lambda t: revenue, channel
    )


def lease_value(
    block: OutgoingBlock,
    a: Assumptions,
    horizon_months: int,
    channel: str = "broker",
    market: Market | None = None,
    start_month: int | None = None,
) -> OptionValue:
    """One node leased from ``start_month`` (the market's ramp by default) to the horizon.

    A contract bills every hour at the contracted rate less the market's vacancy, and is renewed
    every ``lease_contract_months`` at the price of that month (the rate decays by
    ``lease_price_decay_per_month``); on demand bills the utilisation at the month's price.
    Without a market there is no ramp, vacancy or decay (the unbounded view)."""
    start = start_month if start_month is not None else (market.ramp_months if market else 0)
    base = lease_price_per_gpu_hour(block, a) * block.gpus_per_node * HOURS_PER_MONTH
    decay = market.price_decay if market else Decimal(0)
    term = market.contract_months if market else 1
    if a.lease_on_demand:
        billed = a.lease_utilisation

        def signed(t: int) -> int:
            return t

    else:
        billed = Decimal(1) - (market.vacancy if market else Decimal(0))

        def signed(t: int) -> int:
            return start + term * ((t - start) // term)

    keep = Decimal(1) - decay

    def revenue(t: int) -> Decimal:
        return base * billed * keep ** signed(t)

    horizon = Decimal(horizon_months)
    return _keep_option(Option.LEASE, block, a, horizon, horizon, revenue, channel, start)


def resale_value(
    block: OutgoingBlock, a: Assumptions, horizon_months: int, channel: str = "broker", wait_months: int = 0
) -> OptionValue:
    """One node sold ``months_until_sale`` from now, plus ``wait_months`` when the market's depth
    makes it wait its turn (idle meanwhile, and older when it sells)."""
    age = block.age_years + Decimal(wait_months) / 12
    proceeds = _sale_net(block, a, age, channel) - _idle_cost_per_month(block, a) * wait_months
    return _leave_option(Option.RESALE, proceeds, block, a, Decimal(horizon_months), wait_months)


def recycle_value(block: OutgoingBlock, a: Assumptions, horizon_months: int) -> OptionValue:
    return _leave_option(Option.RECYCLE, _recycle_net(block, a), block, a, Decimal(horizon_months))


def value_options(
    block: OutgoingBlock,
    demand: InternalDemand | None,
    assumptions: Assumptions,
    horizon_months: int,
    channel: str = "broker",
    market: Market | None = None,
) -> OptionValues:
    """Return per node of each option over ``horizon_months``: the first node of each (the lease
    starting after the market's ramp, the first sale); later ones are the split's tranches.

    ``channel`` is the resale channel, used both for selling now and for the
    residual value of kept nodes. Redeploy is ``None`` without a demand.
    """
    a = assumptions
    if channel not in a.channel_factors:
        raise ValueError(f"unknown resale channel {channel!r}; known: {sorted(a.channel_factors)}")
    if horizon_months <= 0:
        raise ValueError("horizon_months must be positive")
    redeploy = redeploy_value(block, demand, a, horizon_months, channel) if demand is not None else None
    lease = lease_value(block, a, horizon_months, channel, market)
    resale = resale_value(block, a, horizon_months, channel)
    recycle = recycle_value(block, a, horizon_months)
    return OptionValues(redeploy, lease, resale, recycle)


def best_option(values: Iterable[OptionValue]) -> OptionValue:
    """Highest return; on a tie the earlier option in ``OPTION_ORDER`` wins."""
    return max(values, key=lambda v: (v.return_per_node, -OPTION_ORDER.index(v.option)))
