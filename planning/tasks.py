"""Planning tasks (thin: one service call each)."""

from celery import shared_task

from planning.services.plan_computation import compute_plan

# The 100,000-GPU worst case plans in about 2 s (docs/PERFORMANCE.md); the limits leave room for
# a loaded worker and stay under the broker's visibility timeout (CELERY_LONGEST_TASK_TIME_LIMIT_S).
COMPUTE_SOFT_LIMIT_S = 300
COMPUTE_HARD_LIMIT_S = 330


@shared_task(
    name="planning.tasks.compute_migration_plan",
    soft_time_limit=COMPUTE_SOFT_LIMIT_S,
    time_limit=COMPUTE_HARD_LIMIT_S,
)
def compute_migration_plan(plan_id: str) -> str | None:
    record = compute_plan(plan_id)
    return record.computation if record is not None else None
