"""Migration charts are pure figure builders: test them as data, not pixels."""

from __future__ import annotations

from functools import cache

from planning.charts import capacity_gpus_figure, capacity_perf_figure, power_figure
from planning.engines.migration.planner import demo_inputs, plan_migration
from planning.plan_json import plan_to_json


@cache
def _plan() -> dict:
    """Four scalable units against a raw floor of 1,536 GPUs, as a stored plan holds it."""
    return plan_to_json(
        plan_migration(demo_inputs(delivery_weeks=(4, 12, 40, 56), capacity_floor_gpus=1536, capacity_floor_perf=None))
    )


@cache
def _normalised_plan() -> dict:
    """Two scalable units against a floor of 2,048 H100-equivalents (training), as stored."""
    return plan_to_json(plan_migration(demo_inputs()))


def _traces(fig):
    return {t.name: t for t in fig.data}


def test_capacity_figure_has_plan_naive_pool_and_floor():
    plan = _plan()
    fig = capacity_gpus_figure(plan, 1536)
    traces = _traces(fig)
    assert list(traces) == [
        "plan: total",
        "plan: blackwell",
        "plan: hopper",
        "plan: largest single-generation pool",
        "naive decommission_first: total (217,728 GPU-days below floor)",
        "naive one_for_one_swap: total (0 GPU-days below floor)",
    ]
    assert list(traces["plan: total"].y) == [p["total_gpus"] for p in plan["timeline"]["points"]]
    # Drains are just in time: nothing leaves in week 0 although 512 GPUs are above the 1,536 floor; the count
    # dips to 1,568 when hall 1's H100s make way for the GB200s that land there.
    assert min(traces["plan: total"].y) == 1568
    assert traces["plan: total"].y[0] == 2048 and traces["plan: total"].y[-1] == 2304
    assert min(traces["naive decommission_first: total (217,728 GPU-days below floor)"].y) == 0
    assert traces["naive decommission_first: total (217,728 GPU-days below floor)"].line.dash == "dash"
    floor = [s for s in fig.layout.shapes if s.name == "floor"]
    assert len(floor) == 1 and floor[0].y0 == floor[0].y1 == 1536
    assert traces["plan: total"].x[0] == "2026-07-06"


def test_perf_figure_uses_h100_equivalents_and_the_same_floor_for_naive_troughs():
    plan = _normalised_plan()
    fig = capacity_perf_figure(plan, 2048.0)
    traces = _traces(fig)
    assert traces["plan: total"].y[0] == 2048.0
    assert traces["plan: total"].y[-1] == 2914.56  # 1,152 GB200 GPUs x 2.53
    assert min(traces["plan: total"].y) == 2048.0
    assert "plan: largest single-generation pool" not in traces
    assert "naive decommission_first: total (104,760 H100-equivalent (training)-days below floor)" in traces
    assert fig.layout.title.text == "Capacity (H100-equivalent (training))"
    assert not capacity_perf_figure(plan).layout.shapes


def test_power_figure_plots_each_hall_against_its_budget():
    plan = _plan()
    traces = _traces(power_figure(plan))
    assert set(traces) == {
        "IT kW H1",
        "budget kW H1",
        "IT kW H2",
        "budget kW H2",
        "IT kW total",
        "budget kW total",
        "facility kW (IT x PUE)",
    }
    assert traces["IT kW H1"].y[0] == 2611.2
    assert set(traces["budget kW H2"].y) == {2400.0}
    assert all(kw <= b for kw, b in zip(traces["IT kW H2"].y, traces["budget kW H2"].y))
    assert traces["facility kW (IT x PUE)"].y[0] == round(2611.2 * 1.58, 6)


def test_a_floor_from_a_forecast_is_drawn_week_by_week():
    plan = _normalised_plan()
    points = [dict(p, floor_perf=1000.0 if i < 10 else 2000.0) for i, p in enumerate(plan["timeline"]["points"])]
    fig = capacity_perf_figure({**plan, "timeline": {"points": points}}, None)
    floor = _traces(fig)["floor (the forecast's need)"]
    assert list(floor.y[:11]) == [1000.0] * 10 + [2000.0] and not fig.layout.shapes


def test_a_plan_without_weeks_draws_figures_that_say_so():
    empty = {"timeline": {"points": []}, "naive": [], "perf_unit": "H100-equivalent (training)"}
    for fig in (capacity_gpus_figure(empty, 0), capacity_perf_figure(empty), power_figure(empty)):
        assert fig.data == () and fig.layout.annotations[0].text == "This plan has no weeks to draw."
