"""The exact split: outgoing nodes to options, maximising the total return under the bounds.

It is a transportation problem. Each block of identical nodes supplies its count; each place a
node can go is a *sink* with a capacity (an internal pool wants so many nodes; a lease month
takes what the market absorbs; a sale month what the market's depth allows; recycling takes
any number) and a value per node that depends on the block; some sinks also count against a
shared cap (the operator's cap on leased nodes). A node's value does not depend on where the
other nodes go, so the total is linear in the counts and the problem is a min-cost flow:

    source → block (its nodes) → sink (value per node) → [shared cap] → target

Its constraint matrix is totally unimodular, so the optimum of the linear program is reached
at whole numbers of nodes: solving the flow exactly (network simplex on integer costs, from
networkx) gives the optimal integer split, not an approximation. Money enters as integer
micro-dollars; among splits equal to the micro-dollar the earlier option in ``OPTION_ORDER``
wins (``preference``), so the answer is deterministic.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal

import networkx as nx

SCALE = Decimal(1_000_000)  # micro-dollars
PREFERENCE_SPAN = 8  # preference bonuses are 0..7, below one micro-dollar of value


@dataclass(frozen=True)
class Sink:
    """Somewhere nodes can go: ``capacity`` None is unbounded; ``group`` names a shared cap."""

    key: Hashable
    capacity: int | None
    group: Hashable | None = None
    preference: int = 0  # 0..7: breaks exact ties only


def micro(value: Decimal) -> int:
    return int((value * SCALE).to_integral_value(rounding=ROUND_HALF_EVEN))


def solve(
    supplies: Sequence[int],
    sinks: Sequence[Sink],
    group_caps: dict,
    value: Callable[[int, int], Decimal | None],
) -> dict[tuple[int, int], int]:
    """(block index, sink index) → nodes, for the split that maximises Σ value × nodes.

    ``value(i, j)`` is what one node of block ``i`` returns in sink ``j``, or None when it cannot
    go there. Every block must be able to reach an unbounded sink (recycling), so a split always
    exists."""
    total = sum(supplies)
    g = nx.DiGraph()
    g.add_node("source", demand=-total)
    g.add_node("target", demand=total)
    for group, cap in group_caps.items():
        g.add_edge(("group", group), "target", capacity=cap, weight=0)
    for j, sink in enumerate(sinks):
        after = ("group", sink.group) if sink.group is not None and sink.group in group_caps else "target"
        if sink.capacity is None:
            g.add_edge(("sink", j), after, weight=0)
        else:
            g.add_edge(("sink", j), after, capacity=sink.capacity, weight=0)
    for i, supply in enumerate(supplies):
        if supply <= 0:
            continue
        g.add_edge("source", ("block", i), capacity=supply, weight=0)
        reachable = False
        for j, sink in enumerate(sinks):
            v = value(i, j)
            if v is None:
                continue
            reachable = reachable or (sink.capacity is None and (sink.group is None or sink.group not in group_caps))
            weight = -(micro(v) * PREFERENCE_SPAN + sink.preference)
            g.add_edge(("block", i), ("sink", j), capacity=supply, weight=weight)
        if not reachable:
            raise ValueError(f"block {i} has no unbounded place to go (recycling)")
    if total == 0:
        return {}
    flow = nx.min_cost_flow(g)
    out: dict[tuple[int, int], int] = {}
    for i, supply in enumerate(supplies):
        if supply <= 0:
            continue
        for node, amount in flow[("block", i)].items():
            if amount:
                out[(i, node[1])] = amount
    return out
