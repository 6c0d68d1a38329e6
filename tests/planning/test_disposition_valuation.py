"""Tests for the pure disposition valuation (no Django, no database)."""

from __future__ import annotations

import csv
import dataclasses
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from planning.engines.disposition.assumptions import load_default_assumptions, resale_fraction
from planning.engines.disposition.split import recommend_split
from planning.engines.disposition.types import (
    OPTION_ORDER,
    Assumptions,
    InternalDemand,
    Option,
    OutgoingBlock,
    to_cents,
)
from planning.engines.disposition.valuation import node_kw, value_options

REFERENCE_DIR = Path(__file__).resolve().parents[2] / "core" / "reference"
DEFAULTS = load_default_assumptions()
PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _csv_row(file: str, key: str, name: str) -> dict[str, str]:
    with (REFERENCE_DIR / file).open(newline="", encoding="utf-8") as handle:
        return next(row for row in csv.DictReader(handle) if row[key] == name)


def h100_block(nodes: int = 256, age: Decimal = Decimal(3)) -> OutgoingBlock:
    return OutgoingBlock(
        generation="hopper",
        gpu_model="H100-SXM5-80GB",
        gpus_per_node=8,
        nodes=nodes,
        age_years=age,
        hall="hall-a",
        nodes_per_rack=2,
        drives_per_node=10,
    )


# ---------------------------------------------------------------- strategies

money = st.decimals(min_value=Decimal("0.20"), max_value=Decimal("6.00"), places=2)
fraction = st.decimals(min_value=Decimal("0.10"), max_value=Decimal("1.00"), places=2)
ages = st.decimals(min_value=Decimal("0"), max_value=Decimal("7"), places=2)
horizons = st.integers(min_value=1, max_value=48)
channels = st.sampled_from(sorted(DEFAULTS.channel_factors))
lease_caps = st.one_of(st.none(), st.integers(min_value=0, max_value=80))


@st.composite
def blocks(draw, max_nodes: int = 64) -> OutgoingBlock:
    model = draw(st.sampled_from(["H100-SXM5-80GB", "A100-SXM4-80GB"]))
    return OutgoingBlock(
        generation="hopper" if model.startswith("H") else "ampere",
        gpu_model=model,
        gpus_per_node=8,
        nodes=draw(st.integers(min_value=1, max_value=max_nodes)),
        age_years=draw(ages),
        hall=draw(st.sampled_from(["hall-a", "hall-b"])),
        nodes_per_rack=draw(st.integers(min_value=1, max_value=4)),
        drives_per_node=draw(st.integers(min_value=2, max_value=10)),
    )


@st.composite
def demands(draw, min_horizon: int = 1) -> InternalDemand:
    return InternalDemand(
        pool=draw(st.sampled_from(["inference", "batch", "dev"])),
        nodes_wanted=draw(st.integers(min_value=0, max_value=80)),
        value_per_gpu_hour=draw(money),
        utilisation=draw(fraction),
        horizon_months=draw(st.integers(min_value=min_horizon, max_value=60)),
    )


def _demand_list(min_horizon: int = 1):
    # Distinct pool names keep the scenario readable; the service does not need it.
    return st.lists(demands(min_horizon), max_size=3, unique_by=lambda d: d.pool)


# ---------------------------------------------------------------- defaults


def test_defaults_are_loaded_from_the_csvs_with_their_sources():
    electricity = _csv_row("economics.csv", "parameter", "electricity_price")
    assert DEFAULTS.electricity_usd_per_kwh == Decimal(electricity["value"])
    assert electricity["source"] in DEFAULTS.sources["electricity_usd_per_kwh"]

    pue = _csv_row("facility.csv", "parameter", "pue_industry_average")
    assert DEFAULTS.pue == Decimal(pue["value"])
    assert pue["source"] in DEFAULTS.sources["pue"]

    all_in = _csv_row("facility.csv", "parameter", "all_in_kw_per_h100_gpu")
    assert DEFAULTS.all_in_kw_per_gpu == Decimal(all_in["value"])

    curve = _csv_row("economics.csv", "parameter", "resale_curve_by_age_years")
    assert DEFAULTS.resale_curve == tuple(Decimal(p) for p in curve["value"].split(","))
    assert curve["source"] in DEFAULTS.sources["resale_curve"]

    h100 = _csv_row("economics.csv", "parameter", "rental_h100")
    low, high = (Decimal(p) for p in h100["value"].split("-"))
    assert (DEFAULTS.rental_per_gpu_hour["h100"].low, DEFAULTS.rental_per_gpu_hour["h100"].high) == (low, high)
    assert h100["source"] in DEFAULTS.sources["rental_per_gpu_hour"]

    assert DEFAULTS.channel_factors == {
        "broker": Decimal("0.85"),
        "auction": Decimal("0.65"),
        "distressed": Decimal("0.45"),
    }
    colo = _csv_row("economics.csv", "parameter", "colocation_wholesale_kw_month")
    assert DEFAULTS.freed_power_value_per_kw_month == Decimal("184")
    assert colo["source"] in DEFAULTS.sources["freed_power_value_per_kw_month"]
    assert "not new capacity's margin" in DEFAULTS.sources["freed_power_value_per_kw_month"]


def test_every_field_has_a_source():
    fields = {f.name for f in dataclasses.fields(Assumptions)} - {"sources"}
    assert fields == set(DEFAULTS.sources)
    assert all(DEFAULTS.sources[name] for name in fields)


def test_stated_assumptions_say_they_are_assumptions():
    for name in ("lease_utilisation", "lease_discount", "logistics_cost_per_node", "recycle_value_per_node"):
        assert DEFAULTS.sources[name].startswith("assumption")


def test_new_price_is_derived_from_the_used_market_midpoint():
    used = _csv_row("economics.csv", "parameter", "resale_used_h100_sxm")
    low, high = (Decimal(p) for p in used["value"].split("-"))
    assert DEFAULTS.new_price_per_gpu["h100"] * DEFAULTS.resale_curve[2] == pytest.approx((low + high) / 2)


def test_resale_curve_interpolates_and_extends_by_its_last_step_never_a_clamp():
    curve = DEFAULTS.resale_curve
    assert resale_fraction(curve, Decimal(0)) == Decimal("1.00")
    assert resale_fraction(curve, Decimal("2.5")) == Decimal("0.530")
    assert resale_fraction(curve, Decimal(4)) == Decimal("0.35")
    # the last step is 0.46 → 0.35, −0.11 a year: 0.24 at 5, 0.13 at 6, 0.02 at 7, nothing after
    assert resale_fraction(curve, Decimal(5)) == Decimal("0.24")
    assert resale_fraction(curve, Decimal("5.5")) == Decimal("0.185")
    assert resale_fraction(curve, Decimal(7)) == Decimal("0.02")
    assert resale_fraction(curve, Decimal(9)) == Decimal(0)
    assert "last yearly step" in DEFAULTS.sources["resale_curve"]


@PROPERTY
@given(
    a=st.decimals(min_value=Decimal(0), max_value=Decimal(12), places=2),
    b=st.decimals(min_value=Decimal(0), max_value=Decimal(12), places=2),
)
def test_resale_fraction_never_rises_with_age_and_follows_the_last_slope(a, b):
    curve = DEFAULTS.resale_curve
    young, old = sorted((a, b))
    assert resale_fraction(curve, old) <= resale_fraction(curve, young)
    if Decimal(4) <= old:
        assert resale_fraction(curve, old) == max(Decimal(0), Decimal("0.35") - Decimal("0.11") * (old - 4))


def test_the_residual_at_the_horizon_follows_the_extended_curve_by_hand():
    """A 3-year-old H100 node kept 24 months is sold two months later (drain, list, ship) at
    5 1/6 years: 0.24 - 0.11 / 6 = 0.221667 of a new price of 21,500 / 0.60 = 35,833.33 per
    GPU, x 8 x 0.85 (broker) = 54,012.78, less 10 drives x 25 + 500 logistics = 53,262.78.
    Clamped at 0.35 it would have been 84,533.33: 31,270.55 a node too much, all of it
    in favour of keeping."""
    inference = InternalDemand("inference", 64, Decimal("2.00"), Decimal("0.80"), 24)
    redeploy = value_options(h100_block(), inference, DEFAULTS, 24).redeploy
    assert to_cents(redeploy.residual_value) == Decimal("53262.78")


# ---------------------------------------------------------------- values


def test_cash_and_freed_power_are_apart_and_freed_power_needs_a_reusing_migration():
    values = value_options(h100_block(), None, DEFAULTS, 24)
    assert values.redeploy is None
    # No linked migration plan: nothing reuses the kW, so it is worth nothing.
    assert all(v.freed_power_value == 0 for v in values.available())
    for v in values.available():
        assert v.cash == v.operating_margin + v.disposal_proceeds + v.residual_value == v.return_per_node


def test_freed_power_is_valued_from_reuse_at_the_colocation_rate_and_ranked_only_on_request():
    # The migration reuses 20 kW-months per freed kW within the horizon. An H100 node frees
    # 8 x 10.2 / 8 = 10.2 kW nameplate: 10.2 x 184 x 20 = 37,536 USD of opportunity.
    linked = dataclasses.replace(DEFAULTS, freed_kw_months_per_kw=Decimal(20))
    values = value_options(h100_block(), None, linked, 24)
    assert values.resale.freed_power_value == Decimal("37536.0") == values.recycle.freed_power_value
    assert values.lease.freed_power_value == 0  # kept 24 months: past the 20 months of reuse
    assert values.resale.return_per_node == values.resale.cash
    opted = dataclasses.replace(linked, rank_with_freed_power=True)
    resale = value_options(h100_block(), None, opted, 24).resale
    assert resale.return_per_node == resale.cash + Decimal("37536.0")


def test_kw_per_gpu_comes_from_each_familys_row():
    assert DEFAULTS.kw_per_gpu["h100"] == Decimal("1.4")  # 10.2 / 8 x (1.4 / 1.275)
    a100 = h100_block()
    a100 = dataclasses.replace(a100, gpu_model="A100-SXM4-80GB", generation="ampere")
    # 6.5 kW / 8 GPUs x 1.4 / 1.275 = 0.892 kW per GPU all-in
    assert node_kw(a100, DEFAULTS).quantize(Decimal("0.001")) == Decimal("7.137")
    assert node_kw(h100_block(), DEFAULTS) == Decimal("11.2")


def test_accounting_life_does_not_end_service():
    old = h100_block(age=Decimal("6.5"))  # past the 5.5-year books, 0.5 years of the 7-year physical life left
    lease = value_options(old, None, DEFAULTS, 24).lease
    assert lease.service_months == 6
    split = recommend_split([old], [], DEFAULTS, 24)
    assert any("past its 5.5-year accounting life" in s for s in split.reasoning)


def test_a_contracted_lease_bills_every_hour_utilisation_only_on_demand():
    contract = value_options(h100_block(), None, DEFAULTS, 24).lease
    on_demand = value_options(h100_block(), None, dataclasses.replace(DEFAULTS, lease_on_demand=True), 24).lease
    # 1.70 x 0.90 = 1.53 USD/GPU-h x 730 h x 8 GPUs = 8,935.20 USD a month billed; on demand x 0.6.
    assert contract.operating_margin - on_demand.operating_margin == Decimal("8935.20") * Decimal("0.4") * 24


def test_unknown_channel_is_rejected():
    with pytest.raises(ValueError, match="channel"):
        value_options(h100_block(), None, DEFAULTS, 24, channel="garage-sale")


def test_ties_go_to_the_earlier_option():
    # Nothing to sell for and nothing to scrap for: resale and recycle tie.
    flat = dataclasses.replace(DEFAULTS, new_price_per_gpu={"h100": Decimal(0)}, recycle_value_per_node=Decimal(0))
    values = value_options(h100_block(4), None, flat, 12)
    assert values.resale.return_per_node == values.recycle.return_per_node
    split = recommend_split([h100_block(4)], [], flat, 12, lease_cap_nodes=0)
    assert split.node_counts[Option.RESALE] == 4


# ---------------------------------------------------------------- the split


@PROPERTY
@given(block=blocks(), demand=demands(), horizon=horizons, channel=channels, cap=lease_caps)
def test_redeploy_first_when_demand_covers_the_nodes_at_a_higher_return(block, demand, horizon, channel, cap):
    demand = dataclasses.replace(demand, nodes_wanted=max(demand.nodes_wanted, block.nodes))
    values = value_options(block, demand, DEFAULTS, horizon, channel)
    best_external = max(v.return_per_node for v in (values.lease, values.resale, values.recycle))
    assume(values.redeploy.return_per_node > best_external)
    split = recommend_split([block], [demand], DEFAULTS, horizon, channel, cap)
    assert split.node_counts[Option.REDEPLOY] == block.nodes
    assert split.reasoning[0].startswith(f"Redeploy {block.nodes} nodes")


@PROPERTY
@given(
    block_list=st.lists(blocks(), min_size=1, max_size=3),
    demand_list=_demand_list(),
    horizon=horizons,
    channel=channels,
    cap=lease_caps,
)
def test_split_conserves_nodes_and_money(block_list, demand_list, horizon, channel, cap):
    split = recommend_split(block_list, demand_list, DEFAULTS, horizon, channel, cap)
    assert sum(split.node_counts.values()) == sum(b.nodes for b in block_list)
    assert set(split.node_counts) == set(OPTION_ORDER)
    assert all(count >= 0 for count in split.node_counts.values())
    assert split.total_return == sum(a.total_return for a in split.allocations)
    assert to_cents(sum(split.option_returns.values())) == to_cents(split.total_return)
    if cap is not None:
        assert split.node_counts[Option.LEASE] <= cap
    for demand in demand_list:
        taken = sum(a.nodes for a in split.allocations if a.pool == demand.pool)
        assert taken <= demand.nodes_wanted
    assert split == recommend_split(block_list, demand_list, DEFAULTS, horizon, channel, cap)


@PROPERTY
@given(
    block=blocks(),
    # Pools that need the nodes for the whole horizon: kept nodes are then sold
    # at the same age whichever way they are kept, so a resale price moves
    # redeploy and lease alike and only their standing against resale changes.
    demand_list=_demand_list(min_horizon=48),
    horizon=horizons,
    channel=channels,
    cap=lease_caps,
    raise_by=st.decimals(min_value=Decimal("1"), max_value=Decimal("3"), places=2),
)
def test_raising_resale_prices_never_sends_fewer_nodes_to_resale(block, demand_list, horizon, channel, cap, raise_by):
    richer = dataclasses.replace(
        DEFAULTS, new_price_per_gpu={k: v * raise_by for k, v in DEFAULTS.new_price_per_gpu.items()}
    )
    before = recommend_split([block], demand_list, DEFAULTS, horizon, channel, cap)
    after = recommend_split([block], demand_list, richer, horizon, channel, cap)
    assert after.node_counts[Option.RESALE] >= before.node_counts[Option.RESALE]


@PROPERTY
@given(
    block=blocks(),
    demand_list=_demand_list().filter(bool),
    which=st.integers(min_value=0, max_value=2),
    horizon=horizons,
    channel=channels,
    cap=lease_caps,
    raise_by=st.decimals(min_value=Decimal("0.01"), max_value=Decimal("3.00"), places=2),
)
def test_raising_internal_value_never_redeploys_fewer_nodes(block, demand_list, which, horizon, channel, cap, raise_by):
    index = which % len(demand_list)
    raised = list(demand_list)
    raised[index] = dataclasses.replace(raised[index], value_per_gpu_hour=raised[index].value_per_gpu_hour + raise_by)
    before = recommend_split([block], demand_list, DEFAULTS, horizon, channel, cap)
    after = recommend_split([block], raised, DEFAULTS, horizon, channel, cap)
    assert after.node_counts[Option.REDEPLOY] >= before.node_counts[Option.REDEPLOY]


def test_lease_cap_limits_leasing_and_the_rest_is_sold():
    # A power-rich hall (no value in freed kW) makes leasing beat selling.
    spare_power = dataclasses.replace(DEFAULTS, freed_power_value_per_kw_month=Decimal(0), lease_on_demand=True)
    split = recommend_split([h100_block(100)], [], spare_power, 24, lease_cap_nodes=40)
    assert split.node_counts[Option.LEASE] == 40
    assert split.node_counts[Option.RESALE] == 60
    assert any("below the 1.65 USD/GPU-h breakeven" in s for s in split.reasoning)


def test_the_node_leasing_cannot_take_goes_to_the_best_pool_not_the_last():
    spare_power = dataclasses.replace(DEFAULTS, freed_power_value_per_kw_month=Decimal(0), lease_on_demand=True)
    demand_list = [
        InternalDemand("batch", 1, Decimal("1.20"), Decimal("0.70"), 24),
        InternalDemand("dev", 2, Decimal("1.10"), Decimal("0.70"), 24),
    ]
    values = [value_options(h100_block(2), d, spare_power, 24) for d in demand_list]
    assert all(v.resale.return_per_node < v.redeploy.return_per_node < v.lease.return_per_node for v in values)
    split = recommend_split([h100_block(2)], demand_list, spare_power, 24, lease_cap_nodes=1)
    assert split.node_counts[Option.LEASE] == 1
    # batch (1.20 USD/GPU-h) returns more than dev (1.10): the second node goes there
    assert [(a.pool, a.nodes) for a in split.allocations if a.option is Option.REDEPLOY] == [("batch", 1)]


def test_pools_are_served_by_return_not_by_price_per_gpu_hour():
    spare_power = dataclasses.replace(DEFAULTS, freed_power_value_per_kw_month=Decimal(0), lease_on_demand=True)
    pricey_but_idle = InternalDemand("batch", 1, Decimal("1.45"), Decimal("0.62"), 24)
    cheap_but_busy = InternalDemand("dev", 1, Decimal("1.00"), Decimal("1.00"), 24)
    lease = value_options(h100_block(1), None, spare_power, 24).lease.return_per_node
    assert value_options(h100_block(1), pricey_but_idle, spare_power, 24).redeploy.return_per_node < lease
    assert value_options(h100_block(1), cheap_but_busy, spare_power, 24).redeploy.return_per_node > lease
    split = recommend_split([h100_block(1)], [pricey_but_idle, cheap_but_busy], spare_power, 24)
    assert [(a.option, a.pool) for a in split.allocations] == [(Option.REDEPLOY, "dev")]


def test_demo_256_h100_nodes_with_inference_demand(capsys):
    block = h100_block(256, Decimal(3))
    demand_list = [
        InternalDemand("inference", 64, Decimal("2.00"), Decimal("0.80"), 24),
        InternalDemand("batch", 32, Decimal("1.40"), Decimal("0.70"), 24),
    ]
    split = recommend_split([block], demand_list, DEFAULTS, 24, "broker")
    values = value_options(block, demand_list[0], DEFAULTS, 24, "broker")

    assert block.nodes * block.gpus_per_node == 2048
    assert sum(split.node_counts.values()) == 256
    assert split.node_counts[Option.REDEPLOY] == 64
    # A contracted lease at 1.53 USD/GPU-h billed every hour beats selling at 3 years.
    assert split.node_counts[Option.LEASE] == 256 - 64
    assert values.redeploy.return_per_node > values.lease.return_per_node > values.resale.return_per_node
    assert values.resale.return_per_node > values.recycle.return_per_node
    assert split.total_freed_power_value == 0 and split.total_cash == split.total_return
    assert split.reasoning[0].startswith("Redeploy 64 nodes of H100-SXM5-80GB in hall-a to inference")
    assert any("batch" in s and ("Do not redeploy" in s or "for leasing" in s) for s in split.reasoning)

    with capsys.disabled():
        print("\nDemo: 256 H100 nodes (2,048 GPUs), age 3 years, 24 months, broker")
        for v in values.available():
            print(
                f"  {v.option.value:9} {to_cents(v.return_per_node):>14,} USD/node"
                f"  (freed power {to_cents(v.freed_power_value):,})"
            )
        for option in OPTION_ORDER:
            print(
                f"  {option.value:9} {split.node_counts[option]:4} nodes"
                f"  {to_cents(split.option_returns[option]):>16,} USD"
            )
        print(f"  total {to_cents(split.total_return):,} USD")
        for sentence in split.reasoning:
            print("  -", sentence)


def test_planning_reads_reference_data_through_the_one_loader():
    """core/reference_data.py is the one loader: no planning module opens a CSV itself."""
    root = Path(__file__).resolve().parents[2] / "planning"
    readers = sorted(str(p.relative_to(root)) for p in root.rglob("*.py") if "import csv" in p.read_text())
    assert readers == []
