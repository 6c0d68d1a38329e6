"""The disposition figures, tested as data."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

from planning.disposition_charts import return_per_node_figure, split_figure
from planning.engines.disposition import (
    InternalDemand,
    OutgoingBlock,
    load_default_assumptions,
    recommend_split,
    to_cents,
    value_options,
)

DEFAULTS = load_default_assumptions(Path(__file__).resolve().parents[2] / "core" / "reference")
BLOCK = OutgoingBlock("hopper", "H100-SXM5-80GB", 8, 256, Decimal(3), "hall-a", 2, 10)
INFERENCE = InternalDemand("inference", 64, Decimal("2.00"), Decimal("0.80"), 24)


def test_return_per_node_stacks_freed_power_on_the_nodes_own_return():
    values = value_options(BLOCK, INFERENCE, DEFAULTS, 24)
    figure = return_per_node_figure(values, 24)
    own, freed = figure.data
    assert figure.layout.barmode == "relative"
    assert list(own.x) == list(freed.x) == ["redeploy", "lease", "resale", "recycle"]
    for option_value, own_y, freed_y in zip(values.available(), own.y, freed.y):
        assert freed_y == float(to_cents(option_value.freed_power_value))
        assert round(own_y + freed_y, 2) == float(to_cents(option_value.return_per_node))
    assert "24 months" in figure.layout.title.text


def test_return_per_node_omits_redeploy_without_demand():
    figure = return_per_node_figure(value_options(BLOCK, None, DEFAULTS, 24), 24)
    assert list(figure.data[0].x) == ["lease", "resale", "recycle"]


def test_split_shows_every_option_and_all_nodes():
    split = recommend_split([BLOCK], [INFERENCE], DEFAULTS, 24, "broker")
    figure = split_figure(split)
    (bars,) = figure.data
    assert list(bars.x) == ["redeploy", "lease", "resale", "recycle"]
    assert list(bars.y) == [64, 0, 192, 0]
    assert sum(bars.y) == BLOCK.nodes
    assert bars.text[1] == "0.00 USD"
    assert "broker" in figure.layout.title.text
