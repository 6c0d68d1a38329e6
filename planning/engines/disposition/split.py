"""The split of the outgoing nodes between redeploy, lease, resale and recycle that returns the
most under the bounds, with the constraint that decided each part and the reasoning."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from math import ceil

from planning.engines.disposition.market import Market
from planning.engines.disposition.optimise import Sink, micro, solve
from planning.engines.disposition.types import (
    OPTION_ORDER,
    Allocation,
    Assumptions,
    DispositionRecommendation,
    InternalDemand,
    Option,
    OptionValue,
    OutgoingBlock,
    Tranche,
    gpu_family,
    to_cents,
    usd,
)
from planning.engines.disposition.valuation import (
    lease_price_per_gpu_hour,
    lease_value,
    recycle_value,
    redeploy_value,
    resale_value,
)

PREFERENCE = {Option.REDEPLOY: 3, Option.LEASE: 2, Option.RESALE: 1, Option.RECYCLE: 0}
LEASE_CAP = "lease_cap"


@dataclass(frozen=True)
class Offer:
    """One sink of the split: an option (a pool for redeploy), the month its nodes start (lease)
    or wait (resale), the family whose market bounds it, and its capacity."""

    option: Option
    pool: str | None
    family: str | None
    month: int
    capacity: int | None
    bound: str  # the constraint its capacity stands for: pool:<name>, lease_market, resale_depth, ""


def offers(
    blocks: Sequence[OutgoingBlock],
    demands: Sequence[InternalDemand],
    horizon_months: int,
    market: Market | None,
    months_until_sale: Decimal,
    worth=lambda offer: True,
) -> list[Offer]:
    """Every place a node can go, with its capacity. Without a market, leasing and selling are
    unbounded (one offer each, from month 0); with one, a lease offer per family and month from
    the ramp to the horizon (the market absorbs so many a month) and a sale offer per family and
    month (so many a month), for as many months as it takes to sell every node of the family —
    or until selling a month later returns less than recycling for every block (``worth``
    false): a sale only loses value by waiting, so no later month could be chosen either."""
    out = [Offer(Option.REDEPLOY, d.pool, None, 0, d.nodes_wanted, f"pool:{d.pool}") for d in demands]
    families = sorted({gpu_family(b.gpu_model) for b in blocks})
    if market is None:
        out.append(Offer(Option.LEASE, None, None, 0, None, ""))
        out.append(Offer(Option.RESALE, None, None, 0, None, ""))
    else:
        for family in families:
            absorbed = market.lease_absorption(family)
            if absorbed > 0:
                out.extend(
                    Offer(Option.LEASE, None, family, m, absorbed, "lease_market")
                    for m in range(market.ramp_months, horizon_months)
                )
        for family in families:
            depth = market.resale_depth(family)
            if depth <= 0:
                continue
            nodes = sum(b.nodes for b in blocks if gpu_family(b.gpu_model) == family)
            months = max(horizon_months - int(ceil(months_until_sale)), ceil(nodes / depth), 1)
            for k in range(months):
                offer = Offer(Option.RESALE, None, family, k, depth, "resale_depth")
                if k > 0 and not worth(offer):
                    break
                out.append(offer)
    out.append(Offer(Option.RECYCLE, None, None, 0, None, ""))
    return out


def offer_value(
    block: OutgoingBlock,
    offer: Offer,
    demands: dict[str, InternalDemand],
    a: Assumptions,
    horizon_months: int,
    channel: str,
    market: Market | None,
) -> OptionValue | None:
    """What one node of ``block`` returns in ``offer``, or None when it cannot go there (another
    family's market, or nothing earned within the horizon). Kept-in-place options are valued
    even for blocks that cannot be kept, so the plan can say what the constraint cost."""
    if offer.family is not None and offer.family != gpu_family(block.gpu_model):
        return None
    if offer.option is Option.REDEPLOY:
        return redeploy_value(block, demands[offer.pool], a, horizon_months, channel)
    if offer.option is Option.LEASE:
        value = lease_value(block, a, horizon_months, channel, market, offer.month)
        return value if value.service_months > 0 else None
    if offer.option is Option.RESALE:
        return resale_value(block, a, horizon_months, channel, offer.month)
    return recycle_value(block, a, horizon_months)


def recommend_split(
    blocks: Sequence[OutgoingBlock],
    demands: Sequence[InternalDemand],
    assumptions: Assumptions,
    horizon_months: int,
    channel: str = "broker",
    lease_cap_nodes: int | None = None,
    market: Market | None = None,
) -> DispositionRecommendation:
    """Split the outgoing nodes between the four options so that the total return is the
    largest the bounds allow (``optimise.solve``: exact, not a heuristic).

    The bounds: each internal pool takes at most the nodes it wants; leasing at most
    ``lease_cap_nodes`` in all (``None``: no cap of the operator's) and, with a ``market``, at
    most what the lease market absorbs each month after its ramp; selling at most the market's
    depth each month; nodes a linked migration drains cannot be kept in place (no redeploy or
    lease). Internal demand is therefore served first exactly when it returns more than the
    node could outside, and never starved to hold a lease slot. Without a market leasing and
    selling are unbounded.
    """
    a = assumptions
    if horizon_months <= 0:
        raise ValueError("horizon_months must be positive")
    if channel not in a.channel_factors:
        raise ValueError(f"unknown resale channel {channel!r}; known: {sorted(a.channel_factors)}")
    pools = {d.pool: d for d in demands}
    scrap = [recycle_value(b, a, horizon_months).return_per_node for b in blocks]

    def worth(offer: Offer) -> bool:
        """Some block would rather take this offer than recycle (the unbounded floor)."""
        for i, b in enumerate(blocks):
            v = offer_value(b, offer, pools, a, horizon_months, channel, market)
            if v is not None and v.return_per_node >= scrap[i]:
                return True
        return False

    sinks_of = offers(blocks, demands, horizon_months, market, a.months_until_sale, worth)
    values = [[offer_value(b, o, pools, a, horizon_months, channel, market) for o in sinks_of] for b in blocks]

    def allowed(i: int, j: int) -> bool:
        kept = sinks_of[j].option in (Option.REDEPLOY, Option.LEASE)
        return values[i][j] is not None and (blocks[i].kept_in_place or not kept)

    sinks = [
        Sink(
            key=j,
            capacity=o.capacity,
            group=LEASE_CAP if o.option is Option.LEASE and lease_cap_nodes is not None else None,
            preference=PREFERENCE[o.option],
        )
        for j, o in enumerate(sinks_of)
    ]
    caps = {LEASE_CAP: lease_cap_nodes} if lease_cap_nodes is not None else {}
    flow = solve(
        [b.nodes for b in blocks],
        sinks,
        caps,
        lambda i, j: values[i][j].return_per_node if allowed(i, j) else None,
    )
    used = [0] * len(sinks_of)
    for (_, j), n in flow.items():
        used[j] += n
    leased = sum(n for (_, j), n in flow.items() if sinks_of[j].option is Option.LEASE)
    context = _Context(blocks, sinks_of, values, used, leased, lease_cap_nodes, allowed, market)

    allocations: list[Allocation] = []
    for i, block in enumerate(blocks):
        groups: dict[tuple[Option, str | None], list[tuple[int, int]]] = {}
        for j in range(len(sinks_of)):
            n = flow.get((i, j), 0)
            if n:
                groups.setdefault((sinks_of[j].option, sinks_of[j].pool), []).append((j, n))
        order = sorted(groups, key=lambda k: (OPTION_ORDER.index(k[0]), k[1] or ""))
        for option, pool in order:
            parts = sorted(groups[(option, pool)], key=lambda jn: sinks_of[jn[0]].month)
            tranches = tuple(Tranche(n, values[i][j]) for j, n in parts)
            code, reason = context.decided_by(i, parts)
            allocations.append(
                Allocation(
                    block.label,
                    option,
                    pool,
                    sum(n for _, n in parts),
                    tranches[0].value,
                    tranches,
                    code,
                    reason,
                )
            )
    reasoning = _reasoning(blocks, allocations, context, a, horizon_months, channel, lease_cap_nodes, market)
    counts = {o: sum(al.nodes for al in allocations if al.option is o) for o in OPTION_ORDER}
    returns = {o: sum((al.total_return for al in allocations if al.option is o), Decimal(0)) for o in OPTION_ORDER}
    return DispositionRecommendation(
        horizon_months=horizon_months,
        channel=channel,
        allocations=tuple(allocations),
        node_counts=counts,
        option_returns=returns,
        total_return=sum((al.total_return for al in allocations), Decimal(0)),
        reasoning=tuple(reasoning),
        total_cash=sum((al.total_cash for al in allocations), Decimal(0)),
        total_freed_power_value=sum((al.total_freed_power_value for al in allocations), Decimal(0)),
    )


@dataclass
class _Context:
    blocks: Sequence[OutgoingBlock]
    offers: list[Offer]
    values: list[list[OptionValue | None]]
    used: list[int]
    leased: int
    lease_cap: int | None
    allowed: object
    market: Market | None

    def full(self, j: int) -> bool:
        o = self.offers[j]
        return o.capacity is not None and self.used[j] >= o.capacity

    def why_not(self, i: int, j: int) -> tuple[str, str] | None:
        """Why a node of block ``i`` did not go to offer ``j``, or None when nothing stopped it."""
        o = self.offers[j]
        if not self.allowed(i, j):
            block = self.blocks[i]
            return "migration_drain", block.coherence or "the linked migration plan drains these nodes"
        if self.full(j):
            if o.option is Option.REDEPLOY:
                return o.bound, f"pool {o.pool} wants {o.capacity} nodes and has them"
            if o.option is Option.LEASE:
                return "lease_market", (
                    f"the lease market absorbs {o.capacity} {o.family} nodes a month from month "
                    f"{self.market.ramp_months}; month {o.month}'s are taken"
                )
            return (
                "resale_depth",
                f"the resale market takes {o.capacity} {o.family} nodes a month; month {o.month}'s are taken",
            )
        if o.option is Option.LEASE and self.lease_cap is not None and self.leased >= self.lease_cap:
            return "lease_cap", f"the operator's lease cap of {self.lease_cap} nodes is reached"
        return None

    def decided_by(self, i: int, parts: list[tuple[int, int]]) -> tuple[str, str]:
        """The constraints that put the marginal node of this part where it is: every offer that
        would have returned more for it, closest first, and why it could not go there. The first
        is the one that decided it (the next step up it was denied)."""
        worst = min((self.values[i][j] for j, _ in parts), key=lambda v: v.return_per_node)
        floor = micro(worst.return_per_node)
        mine = {(self.offers[j].option, self.offers[j].pool) for j, _ in parts}
        better = sorted(
            (
                (self.values[i][j], j)
                for j in range(len(self.offers))
                if self.values[i][j] is not None
                and micro(self.values[i][j].return_per_node) > floor
                and (self.offers[j].option, self.offers[j].pool) not in mine
            ),
            key=lambda vj: (vj[0].return_per_node, vj[1]),
        )
        found: dict[str, str] = {}
        months = sorted({self.offers[j].month for j, _ in parts})
        if len(months) > 1:
            bound = self.offers[parts[0][0]].bound
            what = "the lease market's absorption" if bound == "lease_market" else "the resale market's depth"
            found[bound] = f"spread over months {months[0]}-{months[-1]} by {what}"
        for value, j in better:
            reason = self.why_not(i, j)
            if reason is None or reason[0] in found:
                continue
            o = self.offers[j]
            where = f"redeploy → {o.pool}" if o.option is Option.REDEPLOY else o.option.value
            found[reason[0]] = f"{reason[1]} ({where} would return up to {usd(value.return_per_node)}/node)"
        others = [code for code in found if not (len(months) > 1 and code == self.offers[parts[0][0]].bound)]
        if not others:
            found["best_return"] = "returns the most of the options open to it"
            return "best_return", "; ".join(reversed(list(found.values())))
        return others[0], "; ".join([found[c] for c in others][:3] + [found[c] for c in found if c not in others])


def _span(tranches: Sequence[Tranche]) -> str:
    months = [t.value.start_month for t in tranches]
    if len(months) == 1:
        return f"month {months[0]}"
    return f"months {months[0]}-{months[-1]}"


def _average(al: Allocation) -> Decimal:
    return al.total_return / al.nodes


def _reasoning(blocks, allocations, ctx: _Context, a: Assumptions, horizon_months, channel, lease_cap, market):
    horizon_text = f"over {horizon_months} months"
    lines: list[str] = []
    by_block = {b.label: b for b in blocks}
    first = {o: [al for al in allocations if al.option is o] for o in OPTION_ORDER}
    for al in first[Option.REDEPLOY]:
        lines.append(
            f"Redeploy {al.nodes} nodes of {al.block_label} to {al.pool}: {usd(al.value.return_per_node)}/node "
            f"{horizon_text} ({al.reason})."
        )
    for al in first[Option.LEASE]:
        block = by_block[al.block_label]
        price = lease_price_per_gpu_hour(block, a)
        billing = (
            f"{a.lease_utilisation:.0%} utilisation (on demand)"
            if a.lease_on_demand
            else "a contract billed every hour"
        )
        spread = f" in {_span(al.tranches)} as the market absorbs them" if market is not None else ""
        lines.append(
            f"Lease {al.nodes} nodes of {al.block_label}{spread} as a cheaper SKU at {to_cents(price)} USD/GPU-h "
            f"on {billing}: {usd(_average(al))}/node on average {horizon_text} ({al.reason})."
        )
        breakeven = a.rental_breakeven_per_gpu_hour.get(gpu_family(block.gpu_model))
        if breakeven is not None and price < breakeven:
            lines.append(
                f"That price is below the {breakeven} USD/GPU-h breakeven of new {block.gpu_model} capacity; "
                "it pays only because this hardware is already paid for."
            )
    for al in first[Option.RESALE]:
        spread = f" in {_span(al.tranches)} as the market's depth allows" if market is not None else ""
        lines.append(
            f"Sell {al.nodes} nodes of {al.block_label} via {channel}{spread}: {usd(_average(al))}/node cash on "
            f"average {horizon_text} (opportunity, apart: {usd(al.total_freed_power_value / al.nodes)} of reused "
            f"power; {al.reason})."
        )
    for al in first[Option.RECYCLE]:
        lines.append(f"Recycle {al.nodes} nodes of {al.block_label}: {usd(al.value.cash)}/node cash ({al.reason}).")
    for block in blocks:
        kept = [
            al for al in allocations if al.block_label == block.label and al.option in (Option.REDEPLOY, Option.LEASE)
        ]
        if not block.kept_in_place:
            lines.append(f"{block.label} cannot be kept in place: {block.coherence}.")
        elif block.blocked_from_month is not None and kept:
            blocked = sum((al.total_blocked_value for al in kept), Decimal(0))
            lines.append(
                f"{block.label} kept in place is charged {usd(blocked)} for the kW it holds from month "
                f"{block.blocked_from_month} ({block.coherence})."
            )
    for demand_pool in sorted({o.pool for o in ctx.offers if o.option is Option.REDEPLOY}):
        wanted = next(o.capacity for o in ctx.offers if o.option is Option.REDEPLOY and o.pool == demand_pool)
        got = sum(al.nodes for al in first[Option.REDEPLOY] if al.pool == demand_pool)
        if got == 0:
            lines.append(f"Do not redeploy to {demand_pool}: the nodes return more elsewhere.")
        elif got < wanted:
            lines.append(f"{demand_pool} stays {wanted - got} nodes short of the {wanted} it asked for.")
    past_books = [b.label for b in blocks if b.age_years >= a.useful_life_years]
    if past_books:
        lines.append(
            f"{', '.join(past_books)} is past its {a.useful_life_years}-year accounting life: fully depreciated, "
            f"still in service up to its {a.service_life_years}-year physical life."
        )
    opportunity = sum((al.total_freed_power_value for al in allocations), Decimal(0))
    if a.freed_kw_months_per_kw > 0:
        lines.append(
            f"Freed power is opportunity, not cash: {usd(opportunity)} = the kW the migration reuses, from when it "
            f"reuses them ({a.freed_kw_months_per_kw:.2f} kW-months per freed kW), at "
            f"{usd(a.freed_power_value_per_kw_month)} per kW-month wholesale colocation rent; valued once."
        )
    else:
        lines.append("Freed power is not valued: no linked migration plan reuses these kilowatts.")
    if market is None:
        lines.append("No market bounds: leasing and selling take any number of nodes.")
    else:
        lines.append(
            "Market bounds: "
            + "; ".join(
                f"{b['name']} {b['value']}{' (overridden)' if b['overridden'] else ''}" for b in market.as_list()
            )
            + "."
        )
    if lease_cap is not None:
        lines.append(f"The operator caps leasing at {lease_cap} nodes.")
    ranked_by = "cash + freed power (operator opted in)" if a.rank_with_freed_power else "cash"
    lines.append(f"Options are ranked by {ranked_by}; the split maximises the total under the bounds (exact).")
    cash = sum((al.total_cash for al in allocations), Decimal(0))
    lines.append(
        f"Cash return {horizon_text}: {usd(cash)} for {sum(b.nodes for b in blocks)} nodes; "
        f"opportunity value of reused power, apart: {usd(opportunity)}."
    )
    return lines
