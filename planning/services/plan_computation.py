"""Computing a stored migration plan's answer in a worker (``planning.tasks.compute_migration_plan``).

Small plans are computed in the request (``migration_plans.create_plan``); a large one is stored
``queued`` with its resolved inputs, and the worker runs the planner over them, writing the
progress the planner reports so the plan page can show it, then the answer. A failure is stored
with its reason so the page says what happened instead of spinning.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from uuid import UUID

from celery.exceptions import SoftTimeLimitExceeded
from django.db import transaction
from django.utils import timezone
from kombu.exceptions import KombuError

from core.services.audit import record_audit
from planning.engines.migration.planner import plan_migration
from planning.engines.migration.results import MigrationPlanResult
from planning.models import MigrationPlan
from planning.plan_json import inputs_from_json, plan_to_json

logger = logging.getLogger(__name__)

# Progress is written when it has moved this much since the last write: about 20 small
# UPDATEs per plan, whatever its size.
PROGRESS_WRITE_STEP = 0.05
WORKER_ACTOR = "system:planner"


def result_fields(plan: MigrationPlanResult) -> dict:
    """The fields of a computed plan: the planner's answer, done, progress 1."""
    return {
        "result": plan_to_json(plan),
        "feasible": plan.feasible,
        "computation": MigrationPlan.Computation.DONE,
        "progress": 1.0,
        "computation_error": "",
        "computed_at": timezone.now(),
    }


def store_result(record: MigrationPlan, plan: MigrationPlanResult) -> None:
    """Put the planner's answer on ``record`` and save it."""
    fields = result_fields(plan)
    for name, value in fields.items():
        setattr(record, name, value)
    record.save(update_fields=[*fields, "updated_at"])


def failure_reason(exc: BaseException) -> str:
    """What the operator reads on the plan page: what failed, and what to do about it."""
    if isinstance(exc, SoftTimeLimitExceeded):
        return (
            "the planner ran past the worker's time limit; narrow the scope (fewer halls or positions) "
            "or shorten the horizon, then create the plan again"
        )
    return f"{type(exc).__name__}: {exc}"


def queue_computation(plan_id: str, enqueue: Callable[[str], object]) -> None:
    """Hand the plan to the worker (``enqueue(plan_id)``, e.g. the task's ``delay``); a broker that
    cannot be reached fails the plan with what to check instead of leaving it queued forever."""
    try:
        enqueue(plan_id)
    except KombuError as exc:
        logger.exception("could not queue migration plan %s", plan_id)
        record_failure(
            plan_id,
            f"could not queue the computation ({exc}); check the broker (REDIS_URL) and that a Celery worker "
            "runs, then create the plan again",
        )


def record_failure(plan_id: UUID | str, reason: str) -> None:
    with transaction.atomic():
        record = MigrationPlan.objects.select_for_update().filter(pk=plan_id).first()
        if record is None:
            return
        record.computation = MigrationPlan.Computation.FAILED
        record.computation_error = reason
        record.save(update_fields=["computation", "computation_error", "updated_at"])
        record_audit(
            actor=WORKER_ACTOR,
            action="migration_plan.compute",
            target=record,
            after={"computation": record.computation, "progress": record.progress},
            reason=reason,
        )


def compute_plan(plan_id: UUID | str) -> MigrationPlan | None:
    """Run the planner for a queued plan and store its answer; returns None when there is nothing to do.

    Idempotent: a plan already done or failed is left as it is, and a plan left ``running`` by a
    worker that died is computed again (the planner is deterministic, so the answer is the same).
    """
    claimed = MigrationPlan.objects.filter(
        pk=plan_id, computation__in=[MigrationPlan.Computation.QUEUED, MigrationPlan.Computation.RUNNING]
    ).update(computation=MigrationPlan.Computation.RUNNING, progress=0.0, updated_at=timezone.now())
    if not claimed:
        return None
    record = MigrationPlan.objects.get(pk=plan_id)
    written = [0.0]

    def report(fraction: float) -> None:
        # Outside any transaction: each write is visible to the page polling for it at once.
        if fraction - written[0] >= PROGRESS_WRITE_STEP:
            written[0] = fraction
            MigrationPlan.objects.filter(pk=plan_id).update(progress=round(min(fraction, 1.0), 3))

    try:
        plan = plan_migration(inputs_from_json(record.inputs["resolved"]), report)
    except Exception as exc:  # any failure (bad inputs, time limit) is recorded for the operator, never lost
        logger.exception("migration plan %s failed", plan_id)
        record_failure(plan_id, failure_reason(exc))
        return None
    with transaction.atomic():
        record = MigrationPlan.objects.select_for_update().get(pk=plan_id)
        store_result(record, plan)
        record_audit(
            actor=WORKER_ACTOR,
            action="migration_plan.compute",
            target=record,
            after={"computation": record.computation, "feasible": plan.feasible, "headline": plan.headline},
        )
    return record
