"""Migration planner benchmark: the 2,048-GPU demo migration, weekly over 24 months."""

from datetime import date

from benchmarks.harness import Measurement, benchmark, count_queries, timed
from devtools.services.fleet_seed import seed_fleet
from fleet.models import Hall
from planning.engines.migration import inputs as planner_inputs
from planning.engines.migration.planner import plan_migration
from planning.inputs import validate_parameters
from planning.services.migration_plans import create_plan

SITE = "plans"


@benchmark("migration plan, 2,048 GPUs, weekly x 104", fixture="empty", target="<= 1 s")
def plan_2048() -> Measurement:
    site = seed_fleet(gpus=2048, site_slug=SITE, seed=11).site
    halls = [str(h) for h in Hall.objects.filter(site=site).values_list("id", flat=True)]
    body = {"name": "bench", "halls": halls, "horizon_weeks": 104}
    plans: list = []
    queries = count_queries(lambda: plans.append(create_plan(parameters=body, actor="system:bench")))
    ours = timed(lambda: create_plan(parameters=body, actor="system:bench"), repeat=3)
    _, inputs = validate_parameters(body)
    pure = timed(lambda: plan_migration(inputs), repeat=3)
    v = plans[0].result["verdicts"]
    return Measurement(
        ours,
        pure,
        queries,
        note=(
            f"ours = load inventory + plan + store; 'raw SQL' column = the pure planner alone. "
            f"min {v['min_capacity_gpus']} GPUs vs floor {plans[0].inputs['parameters']['capacity_floor_gpus']}, "
            f"naive decommission-first trough {v['naive_trough_gpu_days']['decommission_first']:,} GPU-days"
        ),
    )


def worst_case_inputs(gpus: int = 100_000) -> planner_inputs.PlanInputs:
    """The worst delivery pattern for the planner's work: every new rack arrives in week 0 and
    can only land in converted positions of the old fleet, so each week re-examines a queue of
    hundreds of waiting racks while old racks drain under an H100-equivalent floor."""
    start = date(2026, 7, 6)
    h100 = planner_inputs.NodeTypeSpec.from_reference("H100-SXM5-80GB")
    nvl72 = planner_inputs.NodeTypeSpec.from_reference("GB200-NVL72")
    old_racks = gpus // h100.gpus_per_rack
    upgrade = planner_inputs.FacilityUpgrade("cdu_install", 28, start, 120.0, 120.0)
    positions = tuple(
        planner_inputs.Position(f"P{i:06d}", f"H{i // 1024}", f"P{i:06d}", "air", 20.4, 20.4, upgrade)
        for i in range(old_racks)
    )
    halls = tuple(
        planner_inputs.Hall(f"H{h}", f"hall {h}", 1024 * 20.4 / 0.95 + 6000) for h in range(-(-old_racks // 1024))
    )
    perf = gpus * 1.0
    new_racks = int(perf * 1.125 / (nvl72.gpus_per_rack * nvl72.perf_per_gpu)) + 1
    return planner_inputs.PlanInputs(
        start=start,
        halls=halls,
        positions=positions,
        fleet=(planner_inputs.FleetBlock("h100", h100, old_racks * 2, tuple(p.id for p in positions)),),
        target=nvl72,
        deliveries=(planner_inputs.Delivery(start, new_racks, nvl72.nodes_per_rack, "all at once"),),
        capacity_floor_gpus=0,
        capacity_floor_perf=perf * 0.9,
        largest_job_gpus=1024,
        horizon_weeks=104,
    )


@benchmark(
    "migration plan, 100,000 GPUs, all racks delivered at once into converted positions",
    fixture="empty",
    target="<= 2 s",
)
def plan_100k_worst() -> Measurement:
    inputs = worst_case_inputs()
    small = worst_case_inputs(10_000)
    plans: list = []
    ours = timed(lambda: plans.append(plan_migration(inputs)), repeat=3)
    tenth = timed(lambda: plan_migration(small), repeat=3)
    plan = plans[0]
    return Measurement(
        ours,
        tenth,
        0,
        note=(
            f"pure planner (plan + both naive replays); 'raw SQL' column = the same pattern at 10,000 GPUs "
            f"(linear: ~1/10); {len(plan.placements)} racks placed, feasible={plan.feasible}"
        ),
    )


def capacity_body(months: int = 12) -> dict:
    """A year of monthly demand for DeepSeek-V3 (MoE, MLA) at FP8 with a different request shape every month:
    no month reuses another's sizing, every generation of generations.csv is sized."""
    return {
        "name": "bench",
        "model_name": "deepseek-v3",
        "precision": "FP8",
        "forecast": [
            {
                "month": f"2027-{m + 1:02d}-01",
                "requests_per_s": 50.0 * (m + 1),
                "prompt_tokens": 1000 + 500 * m,
                "output_tokens": 250 + 50 * m,
            }
            for m in range(months)
        ],
        "target_gpu_model": "GB200-NVL72",
        "gpu_models": [
            "A100-SXM4-80GB",
            "H100-SXM5-80GB",
            "H200-SXM5-141GB",
            "B200-SXM6-180GB",
            "B300-SXM",
            "GB300-NVL72",
        ],
    }


@benchmark("capacity plan, 12 months x 7 generations (first principles, cold)", fixture="empty", target="<= 100 ms")
def capacity_12_months() -> Measurement:
    from planning.api.serializers import CapacityPlanIn
    from planning.engines import capacity as cp
    from planning.services.capacity_plans import create_capacity_plan

    body = capacity_body()
    checked = CapacityPlanIn(data=body)
    assert checked.is_valid(), checked.errors
    data = checked.validated_data
    model = cp.reference_models()["deepseek-v3"]
    forecast = tuple(cp.ForecastMonth(**m) for m in data["forecast"])
    models = tuple(dict.fromkeys([data["target_gpu_model"], *data["gpu_models"]]))

    def engine():
        cp._best_points.cache_clear()  # every sizing from scratch: no month or run reuses another's
        cp.plan_capacity(model, forecast, models, precision="FP8")

    def service():
        cp._best_points.cache_clear()
        create_capacity_plan(data=data, actor="system:bench")

    queries = count_queries(service)
    ours = timed(service, repeat=5)
    pure = timed(engine, repeat=5)
    return Measurement(
        ours,
        pure,
        queries,
        note="ours = validate + size + gap + store; 'raw SQL' column = the pure engine alone (84 month x generation sizings)",
    )
