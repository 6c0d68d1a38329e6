"""The migration planner as a pure function: demo figures, facility verdicts, fixes, and properties."""

from __future__ import annotations

import dataclasses
import math
from datetime import date, timedelta

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from core.reference_data import generation, parameter
from fleet.choices import Lifecycle
from fleet.services.lifecycle import STATE_TIMEOUTS
from planning.engines.migration.inputs import (
    DECOMMISSION_FIRST,
    ONE_FOR_ONE_SWAP,
    Delivery,
    FacilityUpgrade,
    FleetBlock,
    Hall,
    NodeTypeSpec,
    PlanInputs,
    Position,
)
from planning.engines.migration.planner import demo_inputs, plan_migration

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


LEGACY = {"delivery_weeks": (4, 12, 40, 56), "capacity_floor_gpus": 1536, "capacity_floor_perf": None}


def test_two_nvl72_units_replace_all_256_h100_nodes_against_an_h100_equivalent_floor():
    # 16 NVL72 racks = 1,152 GPUs x 2.53 (training, generations.csv) = 2,914.56 H100-equivalents
    # against a floor of 2,048 (today's 2,048 H100 GPUs x 1.0).
    plan = plan_migration(demo_inputs())
    v = plan.verdicts
    assert plan.feasible and plan.fixes == ()
    assert v.floor_held and v.old_fleet_retired and v.largest_job_runnable_always
    assert v.trough_perf_days == 0 and v.trough_gpu_days == 0
    assert v.min_capacity_perf == 2048.0 and v.min_capacity_gpus == 1152
    assert sum(p.gpus for p in plan.phases if p.kind == "drain") == 2048
    assert sum(p.nodes for p in plan.phases if p.kind == "drain") == 256
    by_date = {p.date: p for p in plan.timeline.points}
    # SU1 in service on 2026-08-10: 576 x 2.53 = 1,457.28 lets 1,024 H100 GPUs go (1,024 + 1,457.28 >= 2,048).
    assert by_date[date(2026, 8, 10)].gpus_by_generation == {"blackwell": 576, "hopper": 1024}
    assert by_date[date(2026, 8, 10)].perf_total == 2481.28
    assert by_date[date(2026, 10, 5)].gpus_by_generation == {"blackwell": 1152, "hopper": 0}
    assert plan.timeline.points[-1].perf_total == 2914.56
    assert plan.finish == date(2026, 10, 26)
    # The naive sequences are measured against the same H100-equivalent floor.
    naive = {n.name: n for n in plan.naive}
    assert naive[DECOMMISSION_FIRST].min_capacity_perf == 0
    assert v.naive_trough_perf_days[DECOMMISSION_FIRST] == 104_760.32
    assert v.naive_trough_perf_days[ONE_FOR_ONE_SWAP] == 82_432.0
    assert any(
        "delay draining the old fleet by 13 weeks" in n and "2,048 H100-equivalent" in n
        for n in naive[DECOMMISSION_FIRST].notes
    )
    assert plan.headline.startswith("feasible: done by 2026-10-26, minimum 2,048 H100-equivalent (training)")


def test_raw_gpu_floor_keeps_enough_old_gpus_and_says_how_many_racks_would_retire_them():
    # In raw GPUs 1,152 new GPUs cannot hold a 2,048-GPU floor: 896 old GPUs must stay.
    plan = plan_migration(demo_inputs(capacity_floor_gpus=2048, capacity_floor_perf=None))
    assert not plan.feasible and not plan.verdicts.old_fleet_retired
    assert plan.verdicts.floor_held
    assert plan.timeline.points[-1].gpus_by_generation == {"blackwell": 1152, "hopper": 896}
    # 896 GPUs short = 13 NVL72 racks of 72 (936 GPUs rounded up to whole racks).
    assert plan.fixes == (
        "deliver 13 more GB200-NVL72 racks (896 GPUs), or lower the floor to 1,152 GPUs: the new fleet of "
        "1,152 GPUs cannot hold the floor of 2,048 GPUs alone, so 896 old GPUs cannot be retired",
    )


def test_normalised_fix_is_computed_in_the_floor_unit():
    # One SU: 576 x 2.53 = 1,457.28 short of 2,048 by 590.72 = 234 GPUs (590.72 / 2.53) = 4 racks.
    plan = plan_migration(demo_inputs(delivery_weeks=(4,)))
    assert not plan.feasible
    assert plan.fixes[0].startswith(
        "deliver 4 more GB200-NVL72 racks (234 GPUs), or lower the floor to 1,457.3 H100-equivalent (training)"
    )


def test_inference_ratios_come_from_their_own_column():
    plan = plan_migration(demo_inputs(workload="inference"))
    cited = {a.name: a for a in plan.assumptions}
    assert cited["perf_per_gpu[GB200-NVL72]"].value == "2.39"
    assert "inference_vs_h100" in cited["perf_per_gpu[GB200-NVL72]"].source
    assert plan.feasible and plan.timeline.points[-1].perf_total == 2753.28  # 1,152 x 2.39


def test_legacy_raw_floor_plan_holds_floor_and_largest_job_where_decommission_first_troughs():
    plan = plan_migration(demo_inputs(**LEGACY))
    v = plan.verdicts
    assert plan.feasible and plan.fixes == ()
    assert v.facility_first_ok and v.never_exceeds_power_budget
    assert v.floor_held and v.min_capacity_gpus == 1536
    assert v.largest_job_runnable_always and v.old_fleet_retired
    assert v.trough_gpu_days == 0
    assert v.naive_trough_gpu_days == {DECOMMISSION_FIRST: 217_728, ONE_FOR_ONE_SWAP: 0}
    naive = {n.name: n for n in plan.naive}
    assert naive[DECOMMISSION_FIRST].min_capacity_gpus == 0
    assert not naive[DECOMMISSION_FIRST].largest_job_runnable_always
    assert naive[ONE_FOR_ONE_SWAP].stranded_racks == 30
    end = plan.timeline.points[-1]
    assert end.gpus_by_generation == {"blackwell": 2304, "hopper": 0}
    assert len(plan.timeline.points) == 104
    assert v.refused_positions == 112


def test_demo_phases_and_notes_tell_the_story():
    plan = plan_migration(demo_inputs(**LEGACY))
    kinds = {p.kind for p in plan.phases}
    assert kinds == {"facility_prep", "land", "burn_in", "cut_over", "drain", "sanitise", "ship"}
    prep = next(p for p in plan.phases if p.kind == "facility_prep")
    assert (prep.start, prep.end, len(prep.position_ids)) == (START, date(2027, 7, 6), 16)
    assert sum(p.gpus for p in plan.phases if p.kind == "drain") == 2048
    assert sum(p.gpus for p in plan.phases if p.kind == "land") == 2304
    assert any("waited 13 weeks" in n and "facility" in n for n in plan.notes)
    assert any("2,048" in n and "separate" in n for n in plan.fabric_notes)


def test_burn_in_draws_power_before_capacity_counts_and_is_the_lifecycle_deadline():
    plan = plan_migration(demo_inputs())
    by_date = {p.date: p for p in plan.timeline.points}
    landed = by_date[date(2026, 8, 3)]
    assert landed.power_kw_by_hall["H2"] == 8 * 132
    assert landed.gpus_by_generation["blackwell"] == 0
    assert by_date[date(2026, 8, 10)].gpus_by_generation["blackwell"] == 576
    burn = next(p for p in plan.phases if p.kind == "burn_in")
    assert burn.end - burn.start == STATE_TIMEOUTS[Lifecycle.BURN_IN] == timedelta(hours=24)


def test_defaults_are_loaded_and_cited():
    plan = plan_migration(demo_inputs())
    cited = {a.name: a for a in plan.assumptions}
    assert cited["burn_in_days"].value == "1" and parameter("burn_in_deadline").source in cited["burn_in_days"].source
    assert cited["pue[H1]"].value == parameter("pue_industry_average").value
    assert cited["lead_time[cdu_install]"].value == "365"
    assert parameter("cdu_lead_time").source in cited["lead_time[cdu_install]"].source
    assert cited["rack_kw[GB200-NVL72]"].source == generation("GB200-NVL72").source
    assert cited["perf_per_gpu[GB200-NVL72]"].value == "2.53"
    assert cited["rack_weight[GB200-NVL72]"].value == "1,360"
    # 2 x 130.5 kg DGX H100 + 160 kg rack
    assert cited["rack_weight[h100-sxm-8x]"].value == "421"


def test_facility_verdicts_refuse_air_and_date_the_cdu():
    plan = plan_migration(demo_inputs())
    never = _verdict(plan, "H1-R007")
    assert never.status == "never"
    assert never.reason.startswith("GB200-NVL72 needs 132 kW liquid; position H1-R007 is air-cooled with 20.4 kW")
    assert "over the air-cooled rack limit of 40 kW" in never.reason
    upgrade = _verdict(plan, "H1-R113")
    assert upgrade.status == "after_upgrade" and upgrade.ready == date(2027, 7, 6)
    assert "ok after cdu_install" in upgrade.reason and "6-12 months" in upgrade.reason
    assert "ready 2027-07-06" in upgrade.reason
    assert "floor loading not checked" in upgrade.reason
    ok = _verdict(plan, "H2-R001")
    assert ok.status == "ok_now"
    # 1,360 kg x 9.80665 / 0.72 m2 = 18.5 kPa; 132 kW x 0.30 residual = 39.6 kW on air; 132 x 0.7 = 92.4 kW on CDUs.
    assert "floor loading 18.5 kPa (1,360 kg on 0.72 m2) against the hall's 24 kPa" in ok.reason
    assert "residual air heat 39.6 kW" in ok.reason
    assert "hall CDUs 3 x 1,000 kW, N+1: 2,000 kW usable, shared; this rack needs 92.4 kW" in ok.reason


def test_floor_loading_refuses_a_weak_floor():
    inputs = demo_inputs()
    weak = dataclasses.replace(inputs.halls[1], floor_load_kpa=12.0)
    plan = plan_migration(dataclasses.replace(inputs, halls=(inputs.halls[0], weak)))
    verdict = _verdict(plan, "H2-R001")
    assert verdict.status == "never" and "floor loading 18.5 kPa" in verdict.reason and "12 kPa" in verdict.reason
    assert not plan.feasible


def test_shared_cdu_capacity_is_n_plus_one_and_limits_landing():
    # 2 CDUs of 1,000 kW: N+1 leaves 1,000 kW = 10 racks of 92.4 kW liquid heat.
    inputs = demo_inputs()
    small = dataclasses.replace(inputs.halls[1], cdu_units=2)
    plan = plan_migration(dataclasses.replace(inputs, halls=(inputs.halls[0], small)))
    assert sum(1 for p in plan.placements if p.hall_id == "H2") == 10
    assert any("no CDU capacity left in the hall (N+1)" in n for n in plan.notes)
    # The other 6 wait for hall 1's CDU positions (ready 2027-07-06).
    assert sum(1 for p in plan.placements if p.hall_id == "H1") == 6 and plan.finish == date(2027, 8, 9)
    short = plan_migration(dataclasses.replace(inputs, halls=(inputs.halls[0], small), horizon_weeks=40))
    assert not short.feasible
    # 10 racks x 92.4 kW + 6 more x 92.4 = 1,478.4 kW, 478.4 kW over the 1,000 kW usable: one more 1,000 kW unit.
    assert any(
        f.startswith("add 1 CDU units of 1,000 kW in hall H2 so 6 more GB200-NVL72 racks fit") for f in short.fixes
    )


def test_existing_target_racks_are_occupied_and_powered():
    inputs = demo_inputs()
    gb200 = inputs.target
    kept = (FleetBlock("gb200-kept", gb200, 18, ("H2-R001",)),)
    plan = plan_migration(dataclasses.replace(inputs, kept=kept))
    assert "H2-R001" not in {p.position_id for p in plan.placements}
    first = plan.timeline.points[0]
    assert first.power_kw_by_hall["H2"] == 132 and first.gpus_by_generation["blackwell"] == 72
    assert any("1 racks already hold GB200-NVL72" in n and "132 kW" in n for n in plan.notes)


def test_too_small_budget_is_infeasible_with_concrete_fixes():
    plan = plan_migration(demo_inputs(hall2_budget_kw=500))
    assert not plan.feasible and plan.finish is None
    # 3 racks fit 475 kW usable; 10 more land in hall 1 after its CDU; 3 x 132 kW are left: (396 + 396 - 475) / 0.95.
    assert "raise hall H2 budget by 334 kW so 3 more GB200-NVL72 racks fit" in plan.fixes
    assert plan.headline.startswith("INFEASIBLE: raise hall H2 budget")
    assert plan.verdicts.never_exceeds_power_budget


def test_late_cdu_is_infeasible_and_says_how_much_earlier():
    plan = plan_migration(dataclasses.replace(demo_inputs(**LEGACY), horizon_weeks=50))
    assert not plan.feasible
    assert any(
        f.startswith("start the cdu_install for 16 positions (H1-R113..H1-R128) 13 weeks earlier") for f in plan.fixes
    )
    assert "add 16 positions that can take GB200-NVL72 (132 kW liquid)" in plan.fixes


def test_overloaded_hall_and_unreachable_floor_are_reported():
    inputs = demo_inputs()
    halls = (Hall("H1", "hall 1", 2500.0), inputs.halls[1])
    plan = plan_migration(dataclasses.replace(inputs, halls=halls, capacity_floor_perf=2100))
    assert not plan.feasible
    assert any(f.startswith("raise hall H1 budget by 249 kW") for f in plan.fixes)
    assert any(f.startswith("lower the capacity floor to 2,048 H100-equivalent (training)") for f in plan.fixes)


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
            pos = Position(
                f"H{h}-R{i}",
                f"H{h}",
                f"H{h}-R{i}",
                draw(st.sampled_from(["air", "rear_door", "liquid"])),
                kw,
                kw,
                upgrade,
            )
            hall_positions.append(pos)
            if draw(st.booleans()):
                old_positions.append(pos)
        initial_kw = sum(h100.rack_power_kw(2) for p in old_positions if p.hall_id == f"H{h}")
        budget = initial_kw / 0.95 + draw(st.sampled_from([0.0, 60.0, 150.0, 600.0]))
        halls.append(Hall(f"H{h}", f"hall {h}", budget, draw(st.sampled_from([None, 1.2]))))
        positions.extend(hall_positions)
    fleet = (
        (FleetBlock("old", h100, 2 * len(old_positions), tuple(p.id for p in old_positions)),) if old_positions else ()
    )
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
        capacity_floor_perf=draw(st.one_of(st.none(), st.floats(0, initial_gpus))),
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


@settings(max_examples=40, deadline=None)
@given(plan_inputs())
def test_a_feasible_plan_holds_every_floor_and_retires_the_old_fleet(inputs):
    plan = plan_migration(inputs)
    if plan.feasible:
        for point in plan.timeline.points:
            assert point.total_gpus >= inputs.capacity_floor_gpus
            if inputs.capacity_floor_perf:
                assert point.perf_total >= inputs.capacity_floor_perf - 1e-6
        assert plan.verdicts.old_fleet_retired


@st.composite
def covered_inputs(draw) -> PlanInputs:
    """Old H100s on air in hall A, room for every delivery in liquid hall B, a floor in either unit that the
    deliveries cover: the plan must be feasible, hold the floor and retire the old fleet within the horizon."""
    workload = draw(st.sampled_from(["training", "inference"]))
    h100 = NodeTypeSpec.from_reference("H100-SXM5-80GB", workload=workload)
    target = NodeTypeSpec.from_reference(draw(st.sampled_from(["GB200-NVL72", "B200-SXM6-180GB"])), workload=workload)
    old_racks = draw(st.integers(1, 12))
    old_positions = [Position(f"A-{i}", "A", f"A-{i}", "air", 20.4, 20.4) for i in range(old_racks)]
    deliveries = tuple(
        Delivery(START + timedelta(weeks=draw(st.integers(0, 10))), 1, draw(st.integers(1, 2 * target.nodes_per_rack)))
        for _ in range(draw(st.integers(1, 3)))
    )
    new_racks = sum(math.ceil(d.nodes / target.nodes_per_rack) for d in deliveries)
    new_positions = [Position(f"B-{i}", "B", f"B-{i}", "liquid", 140.0, 140.0) for i in range(new_racks)]
    halls = (Hall("A", "hall A", old_racks * 20.4 / 0.95 + 1), Hall("B", "hall B", new_racks * 140 / 0.95 + 1))
    old_gpus = 16 * old_racks
    new_gpus = sum(d.nodes for d in deliveries) * target.gpus_per_node
    new_perf = new_gpus * target.perf_per_gpu
    in_perf = draw(st.booleans())
    if in_perf:
        floor_gpus, floor_perf = 0, draw(st.floats(0, min(float(old_gpus), new_perf)))
    else:
        floor_gpus, floor_perf = draw(st.integers(0, min(old_gpus, new_gpus))), None
    return PlanInputs(
        start=START,
        halls=halls,
        positions=tuple(old_positions + new_positions),
        fleet=(FleetBlock("old", h100, 2 * old_racks, tuple(p.id for p in old_positions)),),
        target=target,
        deliveries=deliveries,
        capacity_floor_gpus=floor_gpus,
        capacity_floor_perf=floor_perf,
        largest_job_gpus=draw(st.integers(0, min(old_gpus, new_gpus))),
        horizon_weeks=draw(st.integers(16, 40)),
        workload=workload,
    )


@settings(max_examples=60, deadline=None)
@given(covered_inputs())
def test_when_deliveries_cover_the_floor_the_old_fleet_is_retired_without_a_trough(inputs):
    plan = plan_migration(inputs)
    assert plan.feasible, plan.fixes
    assert plan.verdicts.old_fleet_retired and plan.verdicts.floor_held
    assert plan.verdicts.trough_gpu_days == 0 and plan.verdicts.trough_perf_days == 0
    assert plan.finish is not None and plan.finish <= START + timedelta(weeks=inputs.horizon_weeks + 3)
