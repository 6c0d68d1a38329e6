"""The disposition figures, tested as data."""

from __future__ import annotations

import dataclasses
from decimal import Decimal

from planning.disposition_charts import return_per_node_figure, split_figure
from planning.engines.disposition.assumptions import load_default_assumptions
from planning.engines.disposition.split import recommend_split
from planning.engines.disposition.types import InternalDemand, OutgoingBlock, to_cents
from planning.engines.disposition.valuation import value_options

DEFAULTS = load_default_assumptions()
BLOCK = OutgoingBlock("hopper", "H100-SXM5-80GB", 8, 256, Decimal(3), "hall-a", 2, 10)
INFERENCE = InternalDemand("inference", 64, Decimal("2.00"), Decimal("0.80"), 24)


def test_return_per_node_shows_cash_with_reused_power_apart():
    linked = dataclasses.replace(DEFAULTS, freed_kw_months_per_kw=Decimal(12))
    values = value_options(BLOCK, INFERENCE, linked, 24)
    figure = return_per_node_figure(values, 24)
    cash, freed = figure.data
    assert figure.layout.barmode == "relative"
    assert freed.name == "opportunity: reused power (not cash)"
    assert list(cash.x) == list(freed.x) == ["redeploy", "lease", "resale", "recycle"]
    for option_value, cash_y, freed_y in zip(values.available(), cash.y, freed.y):
        assert freed_y == float(to_cents(option_value.freed_power_value))
        assert cash_y == float(to_cents(option_value.cash)) == float(to_cents(option_value.return_per_node))
    # Resale frees 10.2 kW x 184 USD x 12 months = 22,521.60 USD of opportunity.
    assert freed.y[2] == 22521.6
    assert "24 months" in figure.layout.title.text


def test_return_per_node_omits_redeploy_without_demand():
    figure = return_per_node_figure(value_options(BLOCK, None, DEFAULTS, 24), 24)
    assert list(figure.data[0].x) == ["lease", "resale", "recycle"]


def test_split_shows_every_option_and_all_nodes():
    split = recommend_split([BLOCK], [INFERENCE], DEFAULTS, 24, "broker")
    figure = split_figure(split)
    (bars,) = figure.data
    assert list(bars.x) == ["redeploy", "lease", "resale", "recycle"]
    # A contracted lease (1.53 USD/GPU-h billed every hour) beats selling 3-year-old H100s.
    assert list(bars.y) == [64, 192, 0, 0]
    assert sum(bars.y) == BLOCK.nodes
    assert bars.text[2] == "0.00 USD"
    assert "broker" in figure.layout.title.text
