"""Migration planner benchmark: the 2,048-GPU demo migration, weekly over 24 months."""
from benchmarks.harness import Measurement, benchmark, count_queries, timed
from devtools.services.fleet_seed import seed_fleet
from fleet.models import Hall
from planning.engines import migration as mp
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
    pure = timed(lambda: mp.plan_migration(inputs), repeat=3)
    v = plans[0].result["verdicts"]
    return Measurement(
        ours, pure, queries,
        note=(f"ours = load inventory + plan + store; 'raw SQL' column = the pure planner alone. "
              f"min {v['min_capacity_gpus']} GPUs vs floor {plans[0].inputs['parameters']['capacity_floor_gpus']}, "
              f"naive decommission-first trough {v['naive_trough_gpu_days']['decommission_first']:,} GPU-days"),
    )
