"""The migration planner as a pure function: worked figures recomputed by hand, exact fixes, an independent
verifier of every plan, and metamorphic properties (budgets, CDU dates, floors, drains just in time)."""

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


def _week(day: date) -> int:
    return (day - START).days // 7


def test_reference_loader_parses_ranges_and_keeps_sources():
    burn = parameter("burn_in_per_rack")
    assert (burn.low, burn.high, burn.unit) == (2, 7, "days")
    assert "CoreWeave" in burn.source
    assert parameter("b200_2048_gpu_fabric").low is None
    nvl72 = generation("GB200-NVL72")
    assert nvl72.node_kw is None and nvl72.rack_kw_typical == 132 and nvl72.cooling == "liquid"
    assert (nvl72.dense_fp8_tflops, nvl72.dense_fp4_tflops) == (5000, 10000)
    assert generation("H100-SXM5-80GB").dense_fp4_tflops is None


def test_node_types_come_from_the_reference_rows():
    h100 = NodeTypeSpec.from_reference("H100-SXM5-80GB")
    nvl72 = NodeTypeSpec.from_reference("GB200-NVL72")
    assert (h100.nodes_per_rack, h100.rack_power_kw(2)) == (2, 20.4)
    assert (nvl72.nodes_per_rack, nvl72.gpus_per_rack, nvl72.rack_power_kw(18)) == (18, 72, 132.0)
    assert nvl72.source == generation("GB200-NVL72").source


# ---------------------------------------------------------------- the demo fleet


LEGACY = {"delivery_weeks": (4, 12, 40, 56), "capacity_floor_gpus": 1536, "capacity_floor_perf": None}


def test_two_nvl72_units_replace_all_256_h100_nodes_once_both_are_in_service():
    # 16 NVL72 racks = 1,152 GPUs x 2.53 (training, generations.csv) = 2,914.56 H100-equivalents against a
    # floor of 2,048 (today's 2,048 H100 GPUs x 1.0). They land in hall 2's liquid positions, so no H100
    # frees anything a delivery needs: the H100s keep serving until the migration is complete.
    plan = plan_migration(demo_inputs())
    v = plan.verdicts
    assert plan.feasible and plan.fixes == ()
    assert v.floor_held and v.old_fleet_retired and v.largest_job_runnable_always
    assert v.trough_perf_days == 0 and v.trough_gpu_days == 0 and v.given_up_perf_days == 0
    assert v.min_capacity_perf == 2048.0 and v.min_capacity_gpus == 1152
    assert sum(d.gpus for d in plan.drains) == 2048 and sum(d.nodes for d in plan.drains) == 256
    by_date = {p.date: p for p in plan.timeline.points}
    # SU1 in service on 2026-08-10 next to every H100: 2,048 + 576 x 2.53 = 3,505.28.
    assert by_date[date(2026, 8, 10)].gpus_by_generation == {"blackwell": 576, "hopper": 2048}
    assert by_date[date(2026, 8, 10)].perf_total == 3505.28
    # SU2 in service on 2026-10-05: 2,914.56 >= 2,048, so every H100 retires that week (drained, sanitised,
    # shipped by 2026-10-26).
    assert {d.start for d in plan.drains} == {date(2026, 10, 5)} and {d.frees for d in plan.drains} == {"retirement"}
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


def test_raw_gpu_floor_keeps_enough_old_gpus_and_the_fix_counts_whole_racks():
    # In raw GPUs 1,152 new GPUs cannot hold a 2,048-GPU floor: 896 old GPUs must stay.
    plan = plan_migration(demo_inputs(capacity_floor_gpus=2048, capacity_floor_perf=None))
    assert not plan.feasible and not plan.verdicts.old_fleet_retired
    assert plan.verdicts.floor_held
    assert plan.timeline.points[-1].gpus_by_generation == {"blackwell": 1152, "hopper": 896}
    # 896 GPUs short = 12.4 -> 13 NVL72 racks, which bring 13 x 72 = 936 GPUs (not the 896 shortfall).
    assert plan.fixes == (
        "deliver 13 more GB200-NVL72 racks with the last delivery (13 x 72 = 936 GPUs, 2,368.1 H100-equivalent "
        "(training)): makes the plan feasible",
        "lower the capacity floor from 2,048 to 1,152 GPUs: makes the plan feasible",
    )


def test_normalised_fix_is_computed_in_the_floor_unit():
    # One SU: 576 x 2.53 = 1,457.28, short of 2,048 by 590.72 = 233.5 GPUs = 3.2 -> 4 racks (288 GPUs).
    plan = plan_migration(demo_inputs(delivery_weeks=(4,)))
    assert not plan.feasible
    assert plan.fixes[0].startswith("deliver 4 more GB200-NVL72 racks with the last delivery (4 x 72 = 288 GPUs")
    assert "lower the capacity floor from 2,048.0 to 1,457 H100-equivalent (training)" in plan.fixes[1]


def test_inference_ratios_come_from_their_own_column():
    plan = plan_migration(demo_inputs(workload="inference"))
    cited = {a.name: a for a in plan.assumptions}
    assert cited["perf_per_gpu[GB200-NVL72]"].value == "2.39"
    assert "inference_vs_h100" in cited["perf_per_gpu[GB200-NVL72]"].source
    assert plan.feasible and plan.timeline.points[-1].perf_total == 2753.28  # 1,152 x 2.39


def test_legacy_four_units_drain_just_in_time_for_hall_1_and_hold_the_floor():
    plan = plan_migration(demo_inputs(**LEGACY))
    v = plan.verdicts
    assert plan.feasible and plan.fixes == ()
    assert v.facility_first_ok and v.never_exceeds_power_budget
    assert v.floor_held and v.largest_job_runnable_always and v.old_fleet_retired
    # SU3 and SU4 can only land in hall 1's 16 CDU positions, ready 2027-07-06 (week 53, 365 days): the first
    # H100s drain in week 50, three weeks (drain, sanitise, ship) before; none drains before.
    assert min(d.start for d in plan.drains) == START + timedelta(weeks=50)
    assert min(p.land for p in plan.placements if p.hall_id == "H1") == START + timedelta(weeks=53)
    # Nothing is drained to sit idle: every drain's position or kW is used within the 3 weeks it takes to free.
    for d in plan.drains:
        assert d.used is not None and (d.used - d.start).days <= 21, d
    # The raw count dips (a GB200 rack frees kW for several H100 racks) but never below 1,536, and capacity never
    # falls below today's 2,048 H100-equivalents: hall 2's GB200s already serve when hall 1's H100s drain.
    assert v.trough_gpu_days == 0 and v.min_capacity_gpus >= 1536 and v.given_up_perf_days == 0
    assert v.naive_trough_gpu_days == {DECOMMISSION_FIRST: 217_728, ONE_FOR_ONE_SWAP: 0}
    naive = {n.name: n for n in plan.naive}
    assert naive[DECOMMISSION_FIRST].min_capacity_gpus == 0
    assert not naive[DECOMMISSION_FIRST].largest_job_runnable_always
    assert naive[ONE_FOR_ONE_SWAP].stranded_racks == 30
    assert plan.timeline.points[-1].gpus_by_generation == {"blackwell": 2304, "hopper": 0}
    assert len(plan.timeline.points) == 104 and v.refused_positions == 112


def test_demo_phases_and_notes_tell_the_story():
    plan = plan_migration(demo_inputs(**LEGACY))
    kinds = {p.kind for p in plan.phases}
    assert kinds == {"facility_prep", "land", "burn_in", "cut_over", "drain", "sanitise", "ship"}
    prep = next(p for p in plan.phases if p.kind == "facility_prep")
    assert (prep.start, prep.end, len(prep.position_ids)) == (START, date(2027, 7, 6), 16)
    assert sum(p.gpus for p in plan.phases if p.kind == "drain") == 2048
    assert sum(p.gpus for p in plan.phases if p.kind == "land") == 2304
    assert any("waited 13 weeks" in n and "facility" in n for n in plan.notes)
    assert any("frees position" in p.notes for p in plan.phases if p.kind == "drain")
    assert any("retired" in p.notes for p in plan.phases if p.kind == "drain")


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
    assert cited["pue_liquid"].value == "1.3" and "pue_new_build" in cited["pue_liquid"].source
    assert cited["lead_time[cdu_install]"].value == "365"
    assert parameter("cdu_lead_time").source in cited["lead_time[cdu_install]"].source
    assert cited["rack_kw[GB200-NVL72]"].source == generation("GB200-NVL72").source
    assert cited["perf_per_gpu[GB200-NVL72]"].value == "2.53"
    assert cited["rack_weight[GB200-NVL72]"].value == "1,360"
    # 2 x 130.5 kg DGX H100 + 160 kg rack
    assert cited["rack_weight[h100-sxm-8x]"].value == "421"
    # Facility checks are on without hall figures: hall 1's room air is its 128 air positions x 20.4 kW.
    assert cited["room_air_kw[H1]"].value == "2,611.2" and "not given" in cited["room_air_kw[H1]"].source
    assert cited["fabric_max_endpoints"].value == "2,048"


def test_facility_verdicts_refuse_air_and_date_the_cdu():
    plan = plan_migration(demo_inputs())
    never = _verdict(plan, "H1-R007")
    assert never.status == "never"
    assert never.reason.startswith("GB200-NVL72 needs 132 kW liquid; position H1-R007 is air-cooled with 20.4 kW")
    assert "over the air-cooled rack limit of 40 kW" in never.reason
    upgrade = _verdict(plan, "H1-R113")
    assert upgrade.status == "after_upgrade" and upgrade.ready == date(2027, 7, 6)
    assert "ok after cdu_install" in upgrade.reason and "6-12 months" in upgrade.reason
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
    assert any("CDU capacity (N+1)" in n for n in plan.notes)
    assert any(b.startswith("CDU capacity (N+1): 6 delivered racks waited") for b in plan.binding_constraints)
    # The other 6 wait for hall 1's CDU positions (ready 2027-07-06).
    assert sum(1 for p in plan.placements if p.hall_id == "H1") == 6 and plan.feasible
    short = plan_migration(dataclasses.replace(inputs, halls=(inputs.halls[0], small), horizon_weeks=40))
    assert not short.feasible
    # 16 racks x 92.4 kW = 1,478.4 kW, 478.4 kW over the 1,000 kW usable: one more 1,000 kW unit, found by replaying.
    assert any(
        f.startswith("add 1 CDU units of 1,000 kW in hall H2 (N+1 keeps one spare): makes the plan feasible")
        for f in short.fixes
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


def test_late_cdu_is_infeasible_and_says_exactly_how_much_earlier():
    late = {**LEGACY, "delivery_weeks": (4, 12, 40, 44)}
    inputs = dataclasses.replace(demo_inputs(**late), horizon_weeks=50)
    plan = plan_migration(inputs)
    assert not plan.feasible
    # Ready in week 53, past the 50-week horizon. A rack landing in week w serves from w + 1 and the H100s
    # retire then, so the last must land by week 48: the replay finds the smallest shift, and one week less fails.
    fix = next(f for f in plan.fixes if f.startswith("start the cdu_install for 16 positions (H1-R113..H1-R128)"))
    assert fix.endswith("makes the plan feasible")
    weeks = int(fix.split(") ")[1].split(" weeks")[0])

    def shifted(k: int) -> PlanInputs:
        return dataclasses.replace(
            inputs,
            positions=tuple(
                dataclasses.replace(
                    p, upgrade=dataclasses.replace(p.upgrade, earliest_start=START - timedelta(weeks=k))
                )
                if p.upgrade
                else p
                for p in inputs.positions
            ),
        )

    assert plan_migration(shifted(weeks)).feasible and not plan_migration(shifted(weeks - 1)).feasible
    assert any(f.startswith("extend the horizon to") for f in plan.fixes)


def test_overloaded_hall_and_unreachable_floor_are_reported():
    inputs = demo_inputs()
    halls = (Hall("H1", "hall 1", 2500.0), inputs.halls[1])
    plan = plan_migration(dataclasses.replace(inputs, halls=halls, capacity_floor_perf=2100))
    assert not plan.feasible
    # 2,611.2 kW / 0.95 = 2,748.6 kW of budget: raise 2,500 by 249 kW (the 5 % margin kept).
    assert any(f.startswith("raise hall H1 budget by 249 kW") and "5% power margin kept" in f for f in plan.fixes)
    assert any(f.startswith("lower the capacity floor to 2,048 H100-equivalent (training)") for f in plan.fixes)


def test_plan_is_deterministic():
    assert plan_migration(demo_inputs()) == plan_migration(demo_inputs())


# ---------------------------------------------------------------- the issue's 2,048-GPU hall


def hall_5500(
    racks: int = 13,
    ratio: float = 2.2,
    budget: float = 5500.0,
    largest_job: int = 1024,
    cdu_lead: str = "low",
    air_kw: float = 24.0,
    horizon: int = 104,
    floor: float = 2048.0,
) -> PlanInputs:
    """256 H100 nodes in 128 air racks (23 kW feeds, 24 kW cooling: 2,611.2 kW drawn) and 32 empty air positions
    of the same hall that a CDU install (6 months, the low end of cdu_lead_time) makes 140 kW liquid; the
    GB200 racks, at ``ratio`` H100-equivalents per GPU, arrive in week 4; floor 2,048 H100-equivalents."""
    h100 = NodeTypeSpec.from_reference("H100-SXM5-80GB", name="h100-sxm-8x")
    gb200 = NodeTypeSpec.from_reference("GB200-NVL72", perf_per_gpu=ratio, perf_source="operator input")
    cdu = FacilityUpgrade.cdu_install(
        earliest_start=START, adds_power_kw=117.0, adds_cooling_kw=140 - air_kw, lead=cdu_lead
    )
    old = [Position(f"A{i:03d}", "H", f"A{i:03d}", "air", 23.0, air_kw) for i in range(128)]
    new = [Position(f"C{i:03d}", "H", f"C{i:03d}", "air", 23.0, air_kw, cdu) for i in range(32)]
    return PlanInputs(
        start=START,
        halls=(Hall("H", "hall", budget),),
        positions=tuple(old + new),
        fleet=(FleetBlock("h100", h100, 256, tuple(p.id for p in old)),),
        target=gb200,
        deliveries=(Delivery(START + timedelta(weeks=4), 1, racks * 18, "13 racks"),),
        capacity_floor_gpus=0,
        capacity_floor_perf=floor,
        largest_job_gpus=largest_job,
        horizon_weeks=horizon,
    )


def test_2048_h100_to_gb200_with_the_default_largest_job_is_feasible_with_13_racks():
    plan = plan_migration(hall_5500())
    v = plan.verdicts
    assert plan.feasible, plan.fixes
    # 13 x 72 = 936 GB200 x 2.2 = 2,059.2 >= 2,048. A 1,024-H100 job needs 1,024 / 2.2 = 465.5 -> 466 GB200
    # GPUs, and 936 are delivered: the job is sized per generation by its ratio, not in raw GPUs.
    assert plan.largest_job_perf == 1024 and v.largest_job_runnable_always
    assert min(p.largest_pool_perf for p in plan.timeline.points) >= 1024
    assert plan.timeline.points[-1].gpus_by_generation == {"blackwell": 936, "hopper": 0}
    # 6 months = 183 days -> ready in week 27 (day 189); all 13 land then next to every H100:
    # 2,611.2 + 13 x 132 = 4,327.2 kW peak (5,225 kW usable), in service week 28, H100s retired that week,
    # drained, sanitised and shipped by week 31. No trough, nothing given up.
    assert max(p.power_kw_total for p in plan.timeline.points) == 4327.2
    assert {_week(p.land) for p in plan.placements} == {27}
    assert _week(plan.finish) == 31
    assert v.trough_perf_days == 0 and v.given_up_perf_days == 0 and v.min_capacity_perf == 2048.0
    # Fabric: 2,048 H100 GPUs stay cabled through drain, sanitise and shipping while 936 GB200 GPUs burn in:
    # 2,984 endpoints on a two-tier NDR fat tree of 2,048.
    assert v.peak_cabled_gpus == 2984
    assert any("2,984 endpoints cabled" in n and "exceed the fabric's 2,048" in n for n in plan.fabric_notes)
    assert any("2,984 endpoints" in b for b in plan.binding_constraints)


def test_a_job_the_new_pool_cannot_hold_keeps_the_old_fleet_and_the_fix_is_in_h100s():
    # At 2.0 per GPU, 936 GB200 GPUs hold 1,872 H100-equivalents: enough for a floor of 1,500, not for a
    # 2,048-H100 job, so the H100s cannot all retire. The exact fix: the largest job the GB200 pool holds.
    plan = plan_migration(hall_5500(ratio=2.0, largest_job=2048, floor=1500.0))
    assert not plan.feasible and not plan.verdicts.old_fleet_retired
    assert (
        "lower the largest job from 2,048 to 1,872 H100s (one generation's pool must hold it: 936 GB200-NVL72 GPUs "
        "at 2 per GPU): makes the plan feasible"
    ) in plan.fixes, plan.fixes


def test_the_budget_fix_is_exact_and_states_its_margin():
    # 1:1 (29 racks of 72 = 2,088 GPUs for a 2,048 floor) in a 4,000 kW hall (3,800 kW usable). Landing the
    # 29th rack needs 29 x 132 = 3,828 kW of GB200 plus the H100s the floor still needs: with 28 racks in
    # service, 2,048 - 28 x 72 = 32 GPUs = 2 racks of 20.4 kW: 3,868.8 kW, 3,868.8 / 0.95 = 4,072.4 kW of budget.
    plan = plan_migration(hall_5500(racks=29, ratio=1.0, budget=4000.0))
    assert not plan.feasible
    assert plan.fixes[0] == (
        "raise hall H budget by 73 kW (to 4,073 kW: 3,869.35 kW usable after the 5% power margin): makes the plan feasible"
    )
    assert plan_migration(hall_5500(racks=29, ratio=1.0, budget=4073.0)).feasible
    assert not plan_migration(hall_5500(racks=29, ratio=1.0, budget=4072.0)).feasible
    assert any(b.startswith("hall power budget") for b in plan.binding_constraints)


def test_facility_checks_are_on_by_default_and_room_air_binds_an_air_hall():
    # Positions cooled by 20.4 kW of room air each: 160 x 20.4 = 3,264 kW, of which the H100s use 2,611.2.
    # 29 GB200 racks leave 29 x 39.6 = 1,148.4 kW of residual heat on room air: only 16 fit next to every
    # H100 (652.8 / 39.6), so the rest wait for H100s to drain, and the plan says it is room air that binds.
    plan = plan_migration(hall_5500(racks=29, ratio=1.0, air_kw=20.4))
    assert any(b.startswith("room-air cooling:") for b in plan.binding_constraints), plan.binding_constraints
    landed_first = sum(1 for p in plan.placements if _week(p.land) == 27)
    assert landed_first == 16
    # Liquid heat counts at the liquid PUE (1.3), air heat at the hall's (1.58, industry average):
    point = next(p for p in plan.timeline.points if _week(p.date) == 27)
    liquid = 16 * 132 * 0.7
    assert math.isclose(point.facility_power_kw, (point.power_kw_total - liquid) * 1.58 + liquid * 1.3, rel_tol=1e-9)


# ---------------------------------------------------------------- an independent verifier (the docs' rules)


def verify(inputs: PlanInputs, plan) -> None:
    """Recompute a plan week by week from its placements and drains with the rules in docs/planning.md,
    without the planner's code: positions never hold two racks, hall power stays within budget less the
    margin, capacity in service (old until its drain starts, new from the week after burn-in and cut-over)
    matches the timeline and holds every floor and the largest job, cooling stays within each hall's
    liquid and room-air capacity, and a drain for a delivery is used within the weeks it takes to free."""
    H = inputs.horizon_weeks
    S = math.ceil((inputs.drain_days + inputs.sanitise_days + inputs.ship_days) / 7)
    P = math.ceil((inputs.drain_days + inputs.sanitise_days) / 7)
    burn = inputs.burn_in_days if inputs.burn_in_days is not None else 1
    service = math.ceil((burn + inputs.cut_over_days) / 7)
    f = 0.30
    target = inputs.target
    positions = {p.id: p for p in inputs.positions}
    drained = {d.position_id: _week(d.start) for d in plan.drains}
    old = []
    for block in inputs.fleet:
        left = block.count
        for pid in block.position_ids:
            n = min(left, block.node_type.nodes_per_rack)
            if n == 0:
                break
            left -= n
            old.append((pid, block.node_type, n))
    new = [(pl.position_id, _week(pl.land), pl.nodes) for pl in plan.placements]
    for t in range(H):
        held: dict[str, int] = {}
        power: dict[str, float] = {h.id: 0.0 for h in inputs.halls}
        liquid = dict(power)
        air = dict(power)
        perf = 0.0
        pools: dict[str, float] = {}
        for pid, spec, n in old:
            end = drained.get(pid)
            if end is None or t < end + S:
                held[pid] = held.get(pid, 0) + 1
            if end is None or t < end + P:
                kw = spec.rack_power_kw(n)
                power[positions[pid].hall_id] += kw
                air[positions[pid].hall_id] += kw
            if end is None or t < end:
                value = n * spec.gpus_per_node * spec.perf_per_gpu
                perf += value
                pools[spec.generation] = pools.get(spec.generation, 0.0) + value
        for pid, land, n in new:
            if t >= land:
                held[pid] = held.get(pid, 0) + 1
                kw = target.rack_power_kw(n)
                power[positions[pid].hall_id] += kw
                liquid[positions[pid].hall_id] += (1 - f) * kw if target.cooling == "liquid" else 0.0
                air[positions[pid].hall_id] += f * kw if target.cooling == "liquid" else kw
            if t >= land + service:
                value = n * target.gpus_per_node * target.perf_per_gpu
                perf += value
                pools[target.generation] = pools.get(target.generation, 0.0) + value
        assert all(v == 1 for v in held.values()), (t, held)
        point = plan.timeline.points[t]
        assert math.isclose(point.perf_total, perf, abs_tol=1e-4), (t, point.perf_total, perf)
        for hall in inputs.halls:
            assert power[hall.id] <= hall.it_power_budget_kw * (1 - inputs.power_margin) + 1e-6
            assert math.isclose(point.power_kw_by_hall[hall.id], power[hall.id], abs_tol=1e-4)
            if hall.air_cooling_kw is None and target.cooling == "liquid":
                room = sum(
                    p.cooling_kw if p.cooling != "liquid" else f * p.cooling_kw
                    for p in inputs.positions
                    if p.hall_id == hall.id
                )
                # An old fleet already over the room's air (an air rack in a liquid position) is tolerated, never
                # made worse.
                start_air = sum(spec.rack_power_kw(n) for pid, spec, n in old if positions[pid].hall_id == hall.id)
                assert air[hall.id] <= max(room, start_air) + 1e-6, (t, hall.id, air[hall.id], room)
        if plan.feasible:
            if inputs.capacity_floor_perf:
                assert perf >= inputs.capacity_floor_perf - 1e-6
            job = inputs.largest_job_perf if inputs.largest_job_perf is not None else inputs.largest_job_gpus
            assert max(pools.values(), default=0.0) >= job - 1e-6
    for d in plan.drains:
        if d.frees != "retirement":
            assert d.used is not None and 0 <= _week(d.used) - _week(d.start) <= S, d


def test_the_verifier_agrees_with_the_issue_and_demo_plans():
    for inputs in (demo_inputs(), demo_inputs(**LEGACY), hall_5500(), hall_5500(racks=29, ratio=1.0)):
        verify(inputs, plan_migration(inputs))


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


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan_inputs())
def test_every_plan_passes_the_independent_verifier(inputs):
    verify(inputs, plan_migration(inputs))


@settings(max_examples=30, deadline=None)
@given(plan_inputs())
def test_plans_only_drain_above_the_floor_once_started(inputs):
    plan = plan_migration(inputs)
    start = plan.timeline.points[0]
    if start.total_gpus >= inputs.capacity_floor_gpus and start.largest_pool_perf >= inputs.largest_job_gpus:
        assert plan.verdicts.floor_held and plan.verdicts.largest_job_runnable_always


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
        largest_job_perf=None,
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
    # Nothing a delivery does not need leaves before the migration is complete: every drain is a retirement
    # once the last delivery is in service (the new racks land in their own hall).
    last_service = max(p.in_service for p in plan.placements)
    assert all(d.frees == "retirement" and d.start >= last_service for d in plan.drains)


def _drained_by_week(plan, horizon: int) -> list[int]:
    counts = [0] * horizon
    for d in plan.drains:
        counts[_week(d.start)] += d.gpus
    total, out = 0, []
    for c in counts:
        total += c
        out.append(total)
    return out


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan_inputs(), st.sampled_from([10.0, 60.0, 200.0, 1000.0]))
def test_a_larger_budget_never_turns_feasible_into_infeasible_nor_completes_later(inputs, more):
    # "Complete": every new rack in service and every old rack out of service. The last shipment (finish) may come
    # later with more budget: fewer old racks are forced out early, so they serve until the migration completes.
    hall = inputs.halls[0]
    richer = dataclasses.replace(
        inputs, halls=(dataclasses.replace(hall, it_power_budget_kw=hall.it_power_budget_kw + more), *inputs.halls[1:])
    )
    base, rich = plan_migration(inputs), plan_migration(richer)
    if base.feasible:
        assert rich.feasible and rich.complete <= base.complete


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan_inputs(), st.integers(1, 20))
def test_an_earlier_cdu_never_turns_feasible_into_infeasible_nor_completes_later(inputs, weeks):
    earlier = dataclasses.replace(
        inputs,
        positions=tuple(
            dataclasses.replace(
                p,
                upgrade=dataclasses.replace(
                    p.upgrade, earliest_start=p.upgrade.earliest_start - timedelta(weeks=weeks)
                ),
            )
            if p.upgrade
            else p
            for p in inputs.positions
        ),
    )
    base, early = plan_migration(inputs), plan_migration(earlier)
    if base.feasible:
        assert early.feasible and early.complete <= base.complete


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan_inputs(), st.floats(0, 200))
def test_raising_the_floor_never_drains_earlier(inputs, more):
    higher = dataclasses.replace(inputs, capacity_floor_perf=(inputs.capacity_floor_perf or 0.0) + more)
    base, high = plan_migration(inputs), plan_migration(higher)
    for t, (a, b) in enumerate(
        zip(_drained_by_week(base, inputs.horizon_weeks), _drained_by_week(high, inputs.horizon_weeks))
    ):
        assert b <= a, (t, a, b)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan_inputs())
def test_no_drain_happens_more_than_the_release_time_before_what_it_frees_is_used(inputs):
    plan = plan_migration(inputs)
    release = math.ceil((inputs.drain_days + inputs.sanitise_days + inputs.ship_days) / 7)
    for d in plan.drains:
        if d.frees == "retirement":
            # Retirements wait for the last delivery in service (or for none to be due).
            assert all(p.in_service <= d.start for p in plan.placements)
        else:
            assert d.used is not None and (d.used - d.start).days <= 7 * release, d
