"""The split under market bounds: exact (a brute force over every assignment of small cases
agrees with it), bounded by the market data, and coherent with a linked migration plan.

The brute force is written from docs/planning.md's rules, not from the optimiser: every node
goes to one place; a pool takes at most the nodes it wants; at most `lease_absorption` nodes of
a family start a lease in any month from the ramp on, at most the operator's cap in all, and a
lease that earns nothing before the horizon is not offered; at most `resale_depth` nodes of a
family are sold in any month; a node the migration drains is not kept in place (no redeploy, no
lease). The value of each place comes from the valuation's public functions.
"""

from __future__ import annotations

import dataclasses
import itertools
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planning.engines.disposition.assumptions import load_default_assumptions
from planning.engines.disposition.market import Market, MarketBound, load_market, override_market
from planning.engines.disposition.split import recommend_split
from planning.engines.disposition.types import OPTION_ORDER, InternalDemand, Option, OutgoingBlock, to_cents
from planning.engines.disposition.valuation import lease_value, recycle_value, redeploy_value, resale_value

DEFAULTS = load_default_assumptions()
MARKET = load_market()
EXHAUSTIVE = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def h100(nodes: int = 256, age: Decimal = Decimal(3), **extra) -> OutgoingBlock:
    return OutgoingBlock("hopper", "H100-SXM5-80GB", 8, nodes, age, "hall-a", 2, 10, **extra)


def small_market(absorption: int, depth: int, ramp: int, decay: str = "0.01", vacancy: str = "0.10") -> Market:
    values = {
        "lease_absorption_h100": absorption,
        "lease_absorption_a100": absorption,
        "resale_depth_h100": depth,
        "resale_depth_a100": depth,
        "lease_ramp_months": ramp,
        "lease_price_decay_per_month": Decimal(decay),
        "lease_vacancy": Decimal(vacancy),
    }
    return override_market(MARKET, {k: Decimal(v) for k, v in values.items()}, "a small case for the brute force")


# ---- the oracle -------------------------------------------------------------------------------


def brute_force(blocks, demands, a, horizon, channel, cap, market) -> Decimal:
    """The best total over every assignment of every node (nodes of a block are alike, so each
    block's multiset of places is enumerated)."""
    families = {b.gpu_model.split("-")[0].lower() for b in blocks}
    total_nodes = sum(b.nodes for b in blocks)
    places = [("pool", d.pool) for d in demands]
    places += [("lease", m) for m in range(market.ramp_months, horizon)]
    places += [("resale", k) for k in range(total_nodes + horizon)]
    places += [("recycle", 0)]
    pools = {d.pool: d for d in demands}

    def value(block, place):
        kind, x = place
        if kind in ("pool", "lease") and not block.kept_in_place:
            return None
        if kind == "pool":
            return redeploy_value(block, pools[x], a, horizon, channel).return_per_node
        if kind == "lease":
            v = lease_value(block, a, horizon, channel, market, x)
            return v.return_per_node if v.service_months > 0 else None
        if kind == "resale":
            return resale_value(block, a, horizon, channel, x).return_per_node
        return recycle_value(block, a, horizon).return_per_node

    table = [{p: value(b, p) for p in places} for b in blocks]
    per_block = [
        [c for c in itertools.combinations_with_replacement(places, b.nodes) if all(table[i][p] is not None for p in c)]
        for i, b in enumerate(blocks)
    ]
    best = None
    for choice in itertools.product(*per_block):
        count: dict = {}
        leased = 0
        for i, places_of in enumerate(choice):
            fam = blocks[i].gpu_model.split("-")[0].lower()
            for kind, x in places_of:
                key = (kind, x) if kind == "pool" else (kind, fam, x)
                count[key] = count.get(key, 0) + 1
                leased += kind == "lease"
        if any(count.get(("pool", p), 0) > d.nodes_wanted for p, d in pools.items()):
            continue
        if cap is not None and leased > cap:
            continue
        if any(
            count.get(("lease", f, m), 0) > market.lease_absorption(f)
            for f in families
            for m in range(market.ramp_months, horizon)
        ):
            continue
        if any(
            count.get(("resale", f, k), 0) > market.resale_depth(f)
            for f in families
            for k in range(total_nodes + horizon)
        ):
            continue
        total = sum((table[i][p] for i, places_of in enumerate(choice) for p in places_of), Decimal(0))
        best = total if best is None or total > best else best
    return best


@st.composite
def small_cases(draw):
    blocks = []
    for i in range(draw(st.integers(1, 2))):
        blocks.append(
            OutgoingBlock(
                "hopper" if i == 0 else "ampere",
                draw(st.sampled_from(["H100-SXM5-80GB", "A100-SXM4-80GB"])),
                8,
                draw(st.integers(1, 2)),
                draw(st.decimals(min_value=Decimal("0.5"), max_value=Decimal("6.5"), places=1)),
                f"hall-{i}",
                2,
                draw(st.integers(2, 10)),
                kept_in_place=draw(st.booleans()) or i == 0 and draw(st.booleans()),
                group=str(i),
            )
        )
    demands = [
        InternalDemand(
            pool,
            draw(st.integers(0, 2)),
            draw(st.decimals(min_value=Decimal("0.50"), max_value=Decimal("3.00"), places=2)),
            draw(st.decimals(min_value=Decimal("0.30"), max_value=Decimal("1.00"), places=2)),
            draw(st.integers(1, 6)),
        )
        for pool in draw(st.lists(st.sampled_from(["inference", "batch"]), max_size=2, unique=True))
    ]
    horizon = draw(st.integers(1, 4))
    market = small_market(draw(st.integers(0, 2)), draw(st.integers(1, 2)), draw(st.integers(0, 2)))
    cap = draw(st.one_of(st.none(), st.integers(0, 3)))
    channel = draw(st.sampled_from(["broker", "auction"]))
    on_demand = draw(st.booleans())
    return blocks, demands, horizon, market, cap, channel, on_demand


@EXHAUSTIVE
@given(case=small_cases())
def test_the_split_is_optimal_against_a_brute_force_of_every_assignment(case):
    blocks, demands, horizon, market, cap, channel, on_demand = case
    a = dataclasses.replace(DEFAULTS, lease_on_demand=on_demand)
    split = recommend_split(blocks, demands, a, horizon, channel, cap, market)
    best = brute_force(blocks, demands, a, horizon, channel, cap, market)
    nodes = sum(b.nodes for b in blocks)
    assert abs(split.total_return - best) <= Decimal("0.000001") * nodes * 2
    assert sum(split.node_counts.values()) == nodes
    for block in blocks:
        if not block.kept_in_place:
            assert not [
                al
                for al in split.allocations
                if al.block_label == block.label and al.option in (Option.REDEPLOY, Option.LEASE)
            ]


def test_the_brute_force_can_fail_a_greedy_that_holds_lease_slots_against_a_pool():
    """The old split held a lease slot against the first pool even with nodes to spare: one node
    leased, one to a poorer pool. The oracle finds the better answer, and so does the split."""
    spare = dataclasses.replace(DEFAULTS, freed_power_value_per_kw_month=Decimal(0), lease_on_demand=True)
    demands = [
        InternalDemand("batch", 1, Decimal("1.20"), Decimal("0.70"), 24),
        InternalDemand("dev", 2, Decimal("1.10"), Decimal("0.70"), 24),
    ]
    unbounded = small_market(absorption=100, depth=100, ramp=0, decay="0", vacancy="0")
    split = recommend_split([h100(2)], demands, spare, 24, "broker", 1, unbounded)
    assert split.total_return == brute_force([h100(2)], demands, spare, 24, "broker", 1, unbounded)
    assert [(al.option, al.pool) for al in split.allocations] == [(Option.REDEPLOY, "batch"), (Option.LEASE, None)]


# ---- the market as data -----------------------------------------------------------------------


def test_market_bounds_come_from_economics_csv_with_sources_and_say_when_assumed():
    for bound in MARKET.as_list():
        assert bound["source"].startswith("economics.csv " + bound["name"])
        assert not bound["overridden"]
    sources = {b["name"]: b["source"] for b in MARKET.as_list()}
    for name in ("lease_absorption_h100", "lease_vacancy", "lease_ramp_months", "resale_depth_h100"):
        assert ": assumed" in sources[name]
    assert (
        "SemiAnalysis" in sources["lease_price_decay_per_month"]
        and "Latent Space" in sources["lease_price_decay_per_month"]
    )
    assert "1-year contracts" in sources["lease_contract_months"]
    assert (MARKET.lease_absorption("h100"), MARKET.resale_depth("h100"), MARKET.ramp_months) == (8, 32, 2)


def test_an_override_needs_a_reason_and_stays_in_bounds():
    with pytest.raises(ValueError, match="say why"):
        override_market(MARKET, {"lease_vacancy": Decimal("0.2")}, "  ")
    with pytest.raises(ValueError, match="fraction below 1"):
        override_market(MARKET, {"lease_vacancy": Decimal("1.5")}, "because")
    with pytest.raises(ValueError, match="whole number"):
        override_market(MARKET, {"resale_depth_h100": Decimal("2.5")}, "because")
    with pytest.raises(ValueError, match="unknown market bound"):
        override_market(MARKET, {"resale_depth_b300": Decimal("2")}, "because")
    market = override_market(MARKET, {"lease_absorption_h100": Decimal(40)}, "signed LOI with Acme for 40 a month")
    bound = market.bounds["lease_absorption_h100"]
    assert bound.overridden and "signed LOI with Acme" in bound.source and market.lease_absorption("h100") == 40


def test_a_lease_tranche_is_worth_less_the_later_it_starts():
    values = [lease_value(h100(1), DEFAULTS, 24, "broker", MARKET, m).return_per_node for m in range(2, 24)]
    assert values == sorted(values, reverse=True)
    first = lease_value(h100(1), DEFAULTS, 24, "broker", MARKET)
    assert first.start_month == 2 and first.service_months == 22


def test_a_contract_bills_less_vacancy_and_renews_at_the_decayed_price_by_hand():
    """1.53 USD/GPU-h x 730 h x 8 = 8,935.20 a month; 10 % vacancy: 8,041.68 in the first
    contract year, 8,041.68 x 0.99^12 = 7,127.97 after its renewal 12 months later."""
    one_year = dataclasses.replace(DEFAULTS, service_life_years=Decimal(100))
    market = small_market(8, 32, 0)
    first = lease_value(h100(1), one_year, 12, "broker", market, 0)
    second = lease_value(h100(1), one_year, 13, "broker", market, 0)
    running = first.operating_margin / 12  # margin a month in the first year, running cost included
    assert to_cents(second.operating_margin - first.operating_margin - running) == to_cents(
        Decimal("8041.68") * Decimal("0.99") ** 12 - Decimal("8041.68")
    )


# ---- what the issue asked for -----------------------------------------------------------------

DEMO_DEMANDS = [
    InternalDemand("inference", 64, Decimal("2.00"), Decimal("0.80"), 24),
    InternalDemand("batch", 32, Decimal("1.40"), Decimal("0.70"), 24),
]


def test_with_no_demand_and_no_cap_the_demo_splits_because_of_the_market():
    split = recommend_split([h100()], [], DEFAULTS, 24, "broker", None, MARKET)
    used = [o for o in OPTION_ORDER if split.node_counts[o]]
    assert len(used) >= 2 and split.node_counts[Option.LEASE] < 256
    lease = next(al for al in split.allocations if al.option is Option.LEASE)
    # 8 a month from month 2: the lease tranches are months 2, 3, ... each of at most 8 nodes
    assert all(t.nodes <= 8 for t in lease.tranches) and lease.tranches[0].value.start_month == 2
    resale = next(al for al in split.allocations if al.option is Option.RESALE)
    assert all(t.nodes <= 32 for t in resale.tranches)
    assert lease.decided_by == "resale_depth" and resale.decided_by == "lease_market"
    assert any(s.startswith("Market bounds: ") for s in split.reasoning)


def test_the_docs_example_with_a_lease_cap_gives_batch_its_32_nodes_and_sells_fewer():
    split = recommend_split([h100()], DEMO_DEMANDS, DEFAULTS, 24, "broker", 64, MARKET)
    pools = {al.pool: al.nodes for al in split.allocations if al.option is Option.REDEPLOY}
    assert pools == {"inference": 64, "batch": 32}
    assert split.node_counts[Option.LEASE] == 64 and split.node_counts[Option.RESALE] == 96 < 128
    unbounded = recommend_split([h100()], DEMO_DEMANDS, DEFAULTS, 24, "broker", 64)
    assert {al.pool: al.nodes for al in unbounded.allocations if al.option is Option.REDEPLOY} == pools


def test_at_36_months_the_inference_pool_is_served():
    split = recommend_split([h100()], DEMO_DEMANDS, DEFAULTS, 36, "broker", None, MARKET)
    pools = {al.pool: al.nodes for al in split.allocations if al.option is Option.REDEPLOY}
    assert pools["inference"] == 64


def test_nodes_a_migration_drains_are_never_kept_in_place_and_the_plan_says_why():
    drained = h100(kept_in_place=False, group="drained", coherence="migration plan P drains them from 2026-08-03")
    split = recommend_split([drained], DEMO_DEMANDS, DEFAULTS, 24, "broker", None, MARKET)
    assert split.node_counts[Option.REDEPLOY] == split.node_counts[Option.LEASE] == 0
    assert {al.decided_by for al in split.allocations} == {"migration_drain"}
    assert any("cannot be kept in place: migration plan P drains them" in s for s in split.reasoning)


def test_kept_options_are_charged_for_the_kw_they_block():
    """A node kept in a hall the migration refills from month 6 holds 10.2 kW there for the
    rest of a 24-month lease: 10.2 x 184 x 18 = 33,782.40, charged in the ranking."""
    free = h100(1)
    blocking = h100(1, blocked_from_month=Decimal(6))
    a, b = lease_value(free, DEFAULTS, 24, "broker", MARKET), lease_value(blocking, DEFAULTS, 24, "broker", MARKET)
    assert b.blocked_value == Decimal("33782.400") and a.blocked_value == 0
    assert a.return_per_node - b.return_per_node == b.blocked_value and a.cash == b.cash
    split = recommend_split([blocking], [], DEFAULTS, 24, "broker", None, MARKET)
    assert any("charged" in s for s in split.reasoning)


@settings(max_examples=40, deadline=None)
@given(
    nodes=st.integers(1, 40),
    absorption=st.integers(0, 6),
    more=st.integers(1, 6),
    depth=st.integers(1, 8),
    horizon=st.integers(1, 30),
)
def test_more_market_never_returns_less(nodes, absorption, more, depth, horizon):
    """Metamorphic: a market that absorbs more leases, or sells deeper, never lowers the total."""
    base = small_market(absorption, depth, 2)
    split = recommend_split([h100(nodes)], [], DEFAULTS, horizon, "broker", None, base)
    wider = recommend_split(
        [h100(nodes)], [], DEFAULTS, horizon, "broker", None, small_market(absorption + more, depth, 2)
    )
    deeper = recommend_split(
        [h100(nodes)], [], DEFAULTS, horizon, "broker", None, small_market(absorption, depth + more, 2)
    )
    assert wider.total_return >= split.total_return - Decimal("0.0001")
    assert deeper.total_return >= split.total_return - Decimal("0.0001")


def test_a_market_without_a_family_is_a_clear_error():
    market = Market({k: v for k, v in MARKET.bounds.items() if not k.endswith("_a100")})
    a100 = OutgoingBlock("ampere", "A100-SXM4-80GB", 8, 4, Decimal(4), "hall-a", 2, 4)
    with pytest.raises(ValueError, match="lease_absorption_a100"):
        recommend_split([a100], [], DEFAULTS, 12, "broker", None, market)
    assert isinstance(MARKET.bounds["lease_vacancy"], MarketBound)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=st.lists(st.integers(1, 60), min_size=1, max_size=3),
    wanted=st.lists(st.integers(0, 40), max_size=2),
    horizon=st.integers(1, 36),
    cap=st.one_of(st.none(), st.integers(0, 50)),
    absorption=st.integers(0, 10),
    depth=st.integers(1, 20),
    ramp=st.integers(0, 4),
)
def test_every_bound_holds_and_every_node_is_placed(sizes, wanted, horizon, cap, absorption, depth, ramp):
    blocks = [h100(n, Decimal(2 + i), group=str(i)) for i, n in enumerate(sizes)]
    demands = [
        InternalDemand(f"pool{i}", w, Decimal("1.80"), Decimal("0.80"), 12 * (i + 1)) for i, w in enumerate(wanted)
    ]
    market = small_market(absorption, depth, ramp)
    split = recommend_split(blocks, demands, DEFAULTS, horizon, "broker", cap, market)
    assert sum(split.node_counts.values()) == sum(sizes)
    assert split.total_return == sum((al.total_return for al in split.allocations), Decimal(0))
    if cap is not None:
        assert split.node_counts[Option.LEASE] <= cap
    for d in demands:
        assert sum(al.nodes for al in split.allocations if al.pool == d.pool) <= d.nodes_wanted
    started: dict = {}
    sold: dict = {}
    for al in split.allocations:
        assert sum(t.nodes for t in al.tranches) == al.nodes
        for t in al.tranches:
            if al.option is Option.LEASE:
                assert ramp <= t.value.start_month < horizon
                started[t.value.start_month] = started.get(t.value.start_month, 0) + t.nodes
            if al.option is Option.RESALE:
                sold[t.value.start_month] = sold.get(t.value.start_month, 0) + t.nodes
    assert all(n <= absorption for n in started.values()) and all(n <= depth for n in sold.values())
    assert split == recommend_split(blocks, demands, DEFAULTS, horizon, "broker", cap, market)


def test_the_worked_example_of_docs_planning_md():
    """The figures docs/planning.md shows, to the cent."""
    inference, batch = DEMO_DEMANDS
    block = h100()
    assert to_cents(redeploy_value(block, inference, DEFAULTS, 24).cash) == Decimal("244936.13")
    assert to_cents(redeploy_value(block, batch, DEFAULTS, 24).cash) == Decimal("158036.93")
    first = lease_value(block, DEFAULTS, 24, "broker", MARKET)
    assert (to_cents(first.operating_margin), to_cents(first.residual_value)) == (
        Decimal("133874.14"),
        Decimal("53262.78"),
    )
    assert to_cents(first.cash) == Decimal("187136.92")
    assert to_cents(lease_value(block, DEFAULTS, 24, "broker", MARKET, 15).cash) == Decimal("98041.11")
    assert to_cents(resale_value(block, DEFAULTS, 24).cash) == Decimal("106869.44")
    assert to_cents(resale_value(block, DEFAULTS, 24, "broker", 4).cash) == Decimal("96535.00")
    assert to_cents(recycle_value(block, DEFAULTS, 24).cash) == Decimal("-450.00")
    rows = [
        ([], None, 24, {"lease": 112, "resale": 144}, "30583706.16"),
        (DEMO_DEMANDS, None, 24, {"redeploy": 96, "lease": 104, "resale": 56}, "41727358.20"),
        (DEMO_DEMANDS, 64, 24, {"redeploy": 96, "lease": 64, "resale": 96}, "41097494.41"),
        (DEMO_DEMANDS, None, 36, {"redeploy": 96, "lease": 136, "resale": 24}, "45665045.68"),
    ]
    for demands, cap, horizon, counts, cash in rows:
        split = recommend_split([block], demands, DEFAULTS, horizon, "broker", cap, MARKET)
        assert {o.value: n for o, n in split.node_counts.items() if n} == counts
        assert to_cents(split.total_cash) == Decimal(cash)
