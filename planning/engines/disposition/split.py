"""The split of the outgoing nodes between redeploy, lease, resale and recycle, with the
reasoning that justifies it."""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal

from planning.engines.disposition.types import (
    OPTION_ORDER,
    Allocation,
    Assumptions,
    DispositionRecommendation,
    InternalDemand,
    Option,
    OutgoingBlock,
    gpu_family,
    to_cents,
    usd,
)
from planning.engines.disposition.valuation import (
    best_option,
    lease_price_per_gpu_hour,
    value_options,
)


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
            disposal = best_option((external[i].resale, external[i].recycle))
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
            best_external = best_option((lease, disposal)) if lease_slots != 0 else disposal
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
            -(
                external[i].lease.return_per_node
                - best_option((external[i].resale, external[i].recycle)).return_per_node
            ),
            i,
        ),
    )
    for i in order:
        if remaining[i] == 0:
            continue
        lease = external[i].lease
        disposal = best_option((external[i].resale, external[i].recycle))
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
        chosen, other = (resale, recycle) if best_option((resale, recycle)) is resale else (recycle, resale)
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
