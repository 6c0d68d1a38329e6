"""The migration planner as a pure function: demo figures, facility verdicts, fixes, and properties."""

from __future__ import annotations

import dataclasses
from datetime import date, timedelta

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from core.reference_data import generation, parameter
from planning.engines.migration import (
    DECOMMISSION_FIRST,
    ONE_FOR_ONE_SWAP,
    Delivery,
    FacilityUpgrade,
    FleetBlock,
    Hall,
    NodeTypeSpec,
    PlanInputs,
    Position,
    demo_inputs,
    plan_migration,
)

START = date(2026, 7, 6)


def _verdict(plan, position_id):
    return next(v for v in plan.position_verdicts if v.position_id == position_id)


def test_reference_loader_parses_ranges_and_keeps_sources():
    burn = parameter("burn_in_per_rack")
    assert (burn.low, burn.high, burn.unit) == (2, 7, "days")
    assert "CoreWeave" in burn.source
    assert parameter("b200_2048_gpu_fabric").low is None
    nvl72 = generation("GB200-NVL72")
    assert nvl72.node_kw is None and nvl72.rack_kw_typical == 132 and nvl72.cooling == "liquid"


def test_node_types_come_from_the_reference_rows():
    h100 = NodeTypeSpec.from_reference("H100-SXM5-80GB")
    nvl72 = NodeTypeSpec.from_reference("GB200-NVL72")
    assert (h100.nodes_per_rack, h100.rack_power_kw(2)) == (2, 20.4)
    assert (nvl72.nodes_per_rack, nvl72.gpus_per_rack, nvl72.rack_power_kw(18)) == (18, 72, 132.0)
    assert nvl72.source == generation("GB200-NVL72").source


def test_demo_plan_holds_floor_and_largest_job_where_decommission_first_troughs():
    plan = plan_migration(demo_inputs())
    v = plan.verdicts
    assert plan.feasible and plan.fixes == ()
    assert v.facility_first_ok and v.never_exceeds_power_budget
    assert v.floor_held and v.min_capacity_gpus == 1728 >= 1536
    assert v.min_capacity_date == date(2027, 8, 2)
    assert v.largest_job_runnable_always
    assert v.trough_gpu_days == 0
    assert v.naive_trough_gpu_days == {DECOMMISSION_FIRST: 228_480, ONE_FOR_ONE_SWAP: 0}
    naive = {n.name: n for n in plan.naive}
    assert naive[DECOMMISSION_FIRST].min_capacity_gpus == 0
    assert not naive[DECOMMISSION_FIRST].largest_job_runnable_always
    assert naive[ONE_FOR_ONE_SWAP].stranded_racks == 30
    assert plan.finish == date(2027, 8, 23)
    end = plan.timeline.points[-1]
    assert end.gpus_by_generation == {"blackwell": 2304, "hopper": 0}
    assert len(plan.timeline.points) == 104
    assert v.refused_positions == 112


def test_demo_phases_and_notes_tell_the_story():
    plan = plan_migration(demo_inputs())
    kinds = {p.kind for p in plan.phases}
    assert kinds == {"facility_prep", "land", "burn_in", "cut_over", "drain", "sanitise", "ship"}
    prep = next(p for p in plan.phases if p.kind == "facility_prep")
    assert (prep.start, prep.end, len(prep.position_ids)) == (START, date(2027, 7, 6), 16)
    assert sum(p.gpus for p in plan.phases if p.kind == "drain") == 2048
    assert sum(p.gpus for p in plan.phases if p.kind == "land") == 2304
    assert any("waited 13 weeks" in n and "facility" in n for n in plan.notes)
    assert any("2,048" in n and "separate" in n for n in plan.fabric_notes)


def test_burn_in_draws_power_before_capacity_counts():
    plan = plan_migration(demo_inputs())
    by_date = {p.date: p for p in plan.timeline.points}
    landed = by_date[date(2026, 8, 3)]
    assert landed.power_kw_by_hall["H2"] == 8 * 132
    assert landed.gpus_by_generation["blackwell"] == 0
    assert by_date[date(2026, 8, 17)].gpus_by_generation["blackwell"] == 576


def test_defaults_are_loaded_and_cited():
    plan = plan_migration(demo_inputs())
    cited = {a.name: a for a in plan.assumptions}
    burn = parameter("burn_in_per_rack")
    assert cited["burn_in_days"].value == "7" and burn.source in cited["burn_in_days"].source
    assert cited["pue[H1]"].value == parameter("pue_industry_average").value
    assert cited["lead_time[cdu_install]"].value == "365"
    assert parameter("cdu_lead_time").source in cited["lead_time[cdu_install]"].source
    assert cited["rack_kw[GB200-NVL72]"].source == generation("GB200-NVL72").source


def test_facility_verdicts_refuse_air_and_date_the_cdu():
    plan = plan_migration(demo_inputs())
    never = _verdict(plan, "H1-R007")
    assert never.status == "never"
    assert never.reason.startswith("GB200-NVL72 needs 132 kW liquid; position H1-R007 is air-cooled with 20.4 kW")
    assert never.reason.endswith("refused")
    upgrade = _verdict(plan, "H1-R113")
    assert upgrade.status == "after_upgrade" and upgrade.ready == date(2027, 7, 6)
    assert "ok after cdu_install" in upgrade.reason and "6-12 months" in upgrade.reason
    assert "ready 2027-07-06" in upgrade.reason
    assert _verdict(plan, "H2-R001").status == "ok_now"


def test_too_small_budget_is_infeasible_with_concrete_fixes():
    plan = plan_migration(demo_inputs(hall2_budget_kw=500))
    assert not plan.feasible and plan.finish is None
    assert "raise hall H2 budget by 1724 kW so 13 more GB200-NVL72 racks fit" in plan.fixes
    assert plan.headline.startswith("INFEASIBLE: raise hall H2 budget")
    assert plan.verdicts.never_exceeds_power_budget


def test_late_cdu_is_infeasible_and_says_how_much_earlier():
    plan = plan_migration(dataclasses.replace(demo_inputs(), horizon_weeks=50))
    assert not plan.feasible
    assert any(f.startswith("start the cdu_install for 16 positions (H1-R113..H1-R128) 13 weeks earlier") for f in plan.fixes)
    assert "add 16 positions that can take GB200-NVL72 (132 kW liquid)" in plan.fixes


def test_overloaded_hall_and_unreachable_floor_are_reported():
    inputs = demo_inputs()
    halls = (Hall("H1", "hall 1", 2500.0), inputs.halls[1])
    plan = plan_migration(dataclasses.replace(inputs, halls=halls, capacity_floor_gpus=2100))
    assert not plan.feasible
    assert any(f.startswith("raise hall H1 budget by 249 kW") for f in plan.fixes)
    assert any(f.startswith("lower the capacity floor to 2048 GPUs") for f in plan.fixes)


def test_plan_is_deterministic():
    assert plan_migration(demo_inputs()) == plan_migration(demo_inputs())


# ---------------------------------------------------------------- properties

TARGETS = ("B200-SXM6-180GB", "GB200-NVL72", "H200-SXM5-141GB")


@st.composite
def plan_inputs(draw) -> PlanInputs:
    h100 = NodeTypeSpec.from_reference("H100-SXM5-80GB")
    target = NodeTypeSpec.from_reference(draw(st.sampled_from(TARGETS)), perf_per_gpu=draw(st.sampled_from([1.0, 2.0])))
    halls, positions, old_positions = [], [], []
    for h in range(draw(st.integers(1, 2))):
        hall_positions = []
        for i in range(draw(st.integers(1, 8))):
            upgrade = None
            if draw(st.booleans()):
                upgrade = FacilityUpgrade(
                    kind="cdu_install",
                    lead_time_days=draw(st.integers(0, 200)),
                    earliest_start=START + timedelta(days=draw(st.integers(-30, 60))),
                    adds_power_kw=draw(st.sampled_from([0.0, 40.0, 120.0])),
                    adds_cooling_kw=draw(st.sampled_from([0.0, 40.0, 120.0])),
                    cooling_after=draw(st.sampled_from(["liquid", "rear_door"])),
                )
            kw = draw(st.sampled_from([20.4, 40.0, 60.0, 140.0]))
            pos = Position(f"H{h}-R{i}", f"H{h}", f"H{h}-R{i}", draw(st.sampled_from(["air", "rear_door", "liquid"])), kw, kw, upgrade)
            hall_positions.append(pos)
            if draw(st.booleans()):
                old_positions.append(pos)
        initial_kw = sum(h100.rack_power_kw(2) for p in old_positions if p.hall_id == f"H{h}")
        budget = initial_kw / 0.95 + draw(st.sampled_from([0.0, 60.0, 150.0, 600.0]))
        halls.append(Hall(f"H{h}", f"hall {h}", budget, draw(st.sampled_from([None, 1.2]))))
        positions.extend(hall_positions)
    fleet = (FleetBlock("old", h100, 2 * len(old_positions), tuple(p.id for p in old_positions)),) if old_positions else ()
    initial_gpus = 16 * len(old_positions)
    deliveries = tuple(
        Delivery(START + timedelta(weeks=draw(st.integers(0, 20))), 1, draw(st.integers(1, 2 * target.nodes_per_rack)))
        for _ in range(draw(st.integers(1, 3)))
    )
    return PlanInputs(
        start=START,
        halls=tuple(halls),
        positions=tuple(positions),
        fleet=fleet,
        target=target,
        deliveries=deliveries,
        capacity_floor_gpus=draw(st.integers(0, initial_gpus)),
        largest_job_gpus=draw(st.integers(0, initial_gpus)) if old_positions else 0,
        horizon_weeks=draw(st.integers(8, 40)),
        burn_in_days=draw(st.sampled_from([None, 2])),
    )


def _fits(spec: NodeTypeSpec, cooling: str, power_kw: float, cooling_kw: float) -> bool:
    need = spec.rack_power_kw(spec.nodes_per_rack)
    air = cooling in ("air", "rear_door")
    kind_ok = spec.cooling == "air-or-liquid" or (air if spec.cooling == "air" else cooling == "liquid")
    return kind_ok and need <= power_kw + 1e-9 and need <= cooling_kw + 1e-9


def _fits_at(spec: NodeTypeSpec, pos: Position, day: date) -> bool:
    """Independent restatement of facility-first: fits today, or after an upgrade that is ready by ``day``."""
    up = pos.upgrade
    return _fits(spec, pos.cooling, pos.power_kw, pos.cooling_kw) or (
        up is not None
        and up.ready <= day
        and _fits(spec, up.cooling_after, pos.power_kw + up.adds_power_kw, pos.cooling_kw + up.adds_cooling_kw)
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan_inputs())
def test_plans_never_exceed_a_hall_budget_nor_misplace_a_rack(inputs):
    plan = plan_migration(inputs)
    usable = {h.id: h.it_power_budget_kw * (1 - inputs.power_margin) for h in inputs.halls}
    for point in plan.timeline.points:
        for hall_id, kw in point.power_kw_by_hall.items():
            assert kw <= usable[hall_id] + 1e-6, (point.date, hall_id, kw)
    assert plan.verdicts.never_exceeds_power_budget
    positions = {p.id: p for p in inputs.positions}
    placed = [pl.position_id for pl in plan.placements]
    assert len(placed) == len(set(placed))
    for placement in plan.placements:
        assert _fits_at(inputs.target, positions[placement.position_id], placement.land), placement
        assert _verdict(plan, placement.position_id).status != "never"
    event(f"placements > 0: {bool(plan.placements)}; feasible: {plan.feasible}")
    if plan.feasible:
        assert plan.fixes == () and plan.verdicts.floor_held and plan.verdicts.largest_job_runnable_always
    else:
        assert plan.fixes and plan.finish is None


@settings(max_examples=30, deadline=None)
@given(plan_inputs())
def test_plans_only_drain_above_the_floor_once_started(inputs):
    plan = plan_migration(inputs)
    start = plan.timeline.points[0]
    if start.total_gpus >= inputs.capacity_floor_gpus and start.largest_pool_gpus >= inputs.largest_job_gpus:
        assert plan.verdicts.floor_held and plan.verdicts.largest_job_runnable_always
