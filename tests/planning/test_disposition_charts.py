"""The disposition figures, drawn from a stored plan's result and tested as data."""

from __future__ import annotations

import dataclasses
import importlib
import uuid
from decimal import Decimal

import pytest
from django.apps import apps

from planning.disposition_charts import block_figures, return_per_node_figure, split_figure
from planning.engines.disposition.assumptions import load_default_assumptions
from planning.engines.disposition.split import recommend_split
from planning.engines.disposition.types import OPTION_ORDER, InternalDemand, OptionValue, OutgoingBlock, to_cents
from planning.engines.disposition.valuation import value_options
from planning.models import DispositionPlan

DEFAULTS = load_default_assumptions()
BLOCK = OutgoingBlock("hopper", "H100-SXM5-80GB", 8, 256, Decimal(3), "hall-a", 2, 10)
INFERENCE = InternalDemand("inference", 64, Decimal("2.00"), Decimal("0.80"), 24)
BATCH = InternalDemand("batch", 32, Decimal("1.40"), Decimal("0.70"), 24)


def _stored(v: OptionValue) -> dict:
    """An option as the stored result holds it (cents, as strings)."""
    return {
        "return_per_node": str(to_cents(v.return_per_node)),
        "cash": str(to_cents(v.cash)),
        "freed_power_value": str(to_cents(v.freed_power_value)),
    }


def _block_row(assumptions, demands) -> dict:
    outside = value_options(BLOCK, None, assumptions, 24)
    return {
        "label": BLOCK.label,
        "options": {o: _stored(getattr(outside, o)) for o in ("lease", "resale", "recycle")},
        "redeploy": {d.pool: _stored(value_options(BLOCK, d, assumptions, 24).redeploy) for d in demands},
    }


def test_return_per_node_shows_cash_with_reused_power_apart_for_the_best_pool():
    linked = dataclasses.replace(DEFAULTS, freed_kw_months_per_kw=Decimal(12))
    figure = return_per_node_figure(_block_row(linked, [BATCH, INFERENCE]), 24)
    cash, freed = figure.data
    assert figure.layout.barmode == "relative"
    assert freed.name == "opportunity: reused power (not cash)"
    assert list(cash.x) == list(freed.x) == ["redeploy", "lease", "resale", "recycle"]
    # Redeploy is the pool that returns most per node: inference, not batch (listed first).
    expected = value_options(BLOCK, INFERENCE, linked, 24).available()
    for option_value, cash_y, freed_y in zip(expected, cash.y, freed.y):
        assert freed_y == float(to_cents(option_value.freed_power_value))
        assert cash_y == float(to_cents(option_value.cash))
    # Resale frees 10.2 kW x 184 USD x 12 months = 22,521.60 USD of opportunity.
    assert freed.y[2] == 22521.6
    assert "24 months" in figure.layout.title.text


def test_return_per_node_omits_redeploy_without_demand():
    figure = return_per_node_figure(_block_row(DEFAULTS, []), 24)
    assert list(figure.data[0].x) == ["lease", "resale", "recycle"]


def _split_result(recommendation) -> dict:
    return {
        "horizon_months": recommendation.horizon_months,
        "channel": recommendation.channel,
        "split": {o.value: recommendation.node_counts[o] for o in OPTION_ORDER},
        "option_returns": {o.value: str(to_cents(recommendation.option_returns[o])) for o in OPTION_ORDER},
    }


def test_split_shows_every_option_and_all_nodes():
    figure = split_figure(_split_result(recommend_split([BLOCK], [INFERENCE], DEFAULTS, 24, "broker")))
    (bars,) = figure.data
    assert list(bars.x) == ["redeploy", "lease", "resale", "recycle"]
    # A contracted lease (1.53 USD/GPU-h billed every hour) beats selling 3-year-old H100s.
    assert list(bars.y) == [64, 192, 0, 0]
    assert sum(bars.y) == BLOCK.nodes
    assert bars.text[2] == "0.00 USD"
    assert "broker" in figure.layout.title.text


def test_empty_figures_say_so():
    result = {"horizon_months": 12, "channel": "broker", "split": {}, "option_returns": {}, "blocks": []}
    split = split_figure(result)
    assert split.data == () and split.layout.annotations[0].text == "No node is assigned in this plan."
    assert block_figures(result) == []
    empty_block = return_per_node_figure({"label": "x", "options": {}, "redeploy": {}}, 12)
    assert empty_block.data == () and "No option" in empty_block.layout.annotations[0].text


@pytest.mark.django_db
def test_rows_stored_with_plotly_json_lose_it_and_still_render(operator_client, ops_api, small_fleet):
    r = ops_api.post(
        "/api/v1/ops/disposition-plans",
        {"name": "old shape", "selection": {"gpu_model": "H100"}, "horizon_months": 24},
        format="json",
        HTTP_IDEMPOTENCY_KEY=str(uuid.uuid4()),
    )
    plan = DispositionPlan.objects.get(pk=r.json()["id"])
    assert "figures" not in plan.result  # new plans store numbers only
    old_shape = {**plan.result, "figures": {"split": {"data": [], "layout": {}}, "returns": []}}
    DispositionPlan.objects.filter(pk=plan.pk).update(result=old_shape)
    page = operator_client.get(f"/plans/disposition/{plan.pk}/")
    assert page.status_code == 200
    figures = page.context["figures"]
    # Drawn now from the stored numbers, not from the stale drawing.
    assert figures["split"]["data"][0]["y"] == [plan.result["split"][o.value] for o in OPTION_ORDER]
    assert [r["block"] for r in figures["returns"]] == [b["label"] for b in plan.result["blocks"]]

    migration = importlib.import_module("planning.migrations.0003_drop_stored_disposition_figures")
    migration.drop_figures(apps, None)
    plan.refresh_from_db()
    assert "figures" not in plan.result and plan.result["split"] == old_shape["split"]
    assert operator_client.get(f"/plans/disposition/{plan.pk}/").status_code == 200
