"""Creating and applying stored migration plans (the writes around the pure planner)."""

from __future__ import annotations

from datetime import timedelta
from uuid import UUID

from django.db import transaction
from django.utils import timezone

from core.services.audit import record_audit
from fleet.models import Node, NodeType, Rack
from planning.engines.migration.inputs import PlanInputs
from planning.engines.migration.planner import plan_migration
from planning.engines.migration.results import MigrationPlanResult
from planning.inputs import (
    PlanInputError,
    validate_parameters,
)
from planning.models import MigrationPlan, PlannedAction
from planning.plan_json import inputs_from_json, inputs_to_json
from planning.selectors import drain_starts, nodes_to_decommission
from planning.services.plan_computation import queue_computation, result_fields
from planning.tasks import compute_migration_plan


class PlanNotApplicable(Exception):
    """An infeasible plan is never applied: its schedule would break the floor or the budget."""


# Plans up to this many racks (positions in scope + racks delivered) are computed in the request:
# the planner is linear in racks at about 0.2-0.3 ms each on the shared VM (docs/PERFORMANCE.md),
# so 2,000 racks answer in about half a second. Larger ones go to a worker and the page shows its progress.
INLINE_MAX_RACKS = 2000


def plan_size(inputs: PlanInputs) -> int:
    """The planner's work in racks: every position in scope and every rack delivered."""
    per_rack = max(1, inputs.target.nodes_per_rack)
    delivered = sum(-(-d.nodes // per_rack) for d in inputs.deliveries)
    return len(inputs.positions) + delivered


@transaction.atomic
def create_plan(*, parameters: dict, actor: str) -> MigrationPlan:
    """Plan checked ``parameters`` over the inventory, store and audit it (``PlanInputError`` when they do not
    resolve: unknown halls or racks, deliveries before the start...).

    ``parameters`` come from ``planning.api.serializers.plan_parameters`` (API and console) or from the
    product itself (a capacity plan's gap, the demo). A plan of more than ``INLINE_MAX_RACKS`` racks is
    stored ``queued`` and computed by a worker once this transaction commits."""
    params, inputs = validate_parameters(parameters)
    size = plan_size(inputs)
    resolved = {"parameters": params, "resolved": inputs_to_json(inputs)}
    if size > INLINE_MAX_RACKS:
        record = MigrationPlan.objects.create(
            name=params["name"],
            created_by=actor,
            inputs=resolved,
            result=None,
            feasible=None,
            computation=MigrationPlan.Computation.QUEUED,
            progress=0.0,
        )
        record_audit(
            actor=actor,
            action="migration_plan.create",
            target=record,
            after={"name": record.name, "computation": record.computation, "racks": size},
        )
        plan_id = str(record.id)
        transaction.on_commit(lambda: queue_computation(plan_id, compute_migration_plan.delay))
        return record
    try:
        plan = plan_migration(inputs)
    except ValueError as exc:  # the planner refuses inputs it cannot place (e.g. nodes that do not fit)
        raise PlanInputError([{"field": "non_field_errors", "message": str(exc)}]) from exc
    record = MigrationPlan.objects.create(name=params["name"], created_by=actor, inputs=resolved, **result_fields(plan))
    record_audit(
        actor=actor,
        action="migration_plan.create",
        target=record,
        after={"name": record.name, "feasible": plan.feasible, "headline": plan.headline},
    )
    return record


def recompute(record: MigrationPlan) -> MigrationPlanResult:
    """The planner's dataclasses for a stored plan (deterministic: equal to ``record.result``)."""
    return plan_migration(inputs_from_json(record.inputs["resolved"]))


@transaction.atomic
def apply_plan(*, plan_id: UUID, actor: str) -> tuple[MigrationPlan, int]:
    """Schedule the plan's work in the inventory; applying an applied plan creates nothing.

    Creates a ``PlannedAction`` per facility upgrade, per new rack's intake and per drained
    node's decommission, with their dates. Returns the plan and how many actions were created.
    """
    record = MigrationPlan.objects.select_for_update().get(pk=plan_id)
    if record.status == MigrationPlan.Status.APPLIED:
        return record, 0
    if record.computation != MigrationPlan.Computation.DONE:
        raise PlanNotApplicable(
            "This plan is not computed yet (or its computation failed); wait for it on the plan page, "
            "or create the plan again if it failed."
        )
    if not record.feasible:
        raise PlanNotApplicable("This plan is infeasible; apply one of its fixes, create a new plan and apply that.")
    resolved = record.inputs["resolved"]
    params = record.inputs["parameters"]
    rack_ids = [p["id"] for p in resolved["positions"]]
    racks = {str(r.id): r for r in Rack.objects.filter(id__in=rack_ids)}
    target = NodeType.objects.get(slug=params["target_node_type"])
    result = record.result
    actions: list[PlannedAction] = []
    upgrades = {p["id"]: p["upgrade"] for p in resolved["positions"] if p["upgrade"]}
    for phase in result["phases"]:
        if phase["kind"] != "facility_prep":
            continue
        for pid in phase["position_ids"]:
            actions.append(
                PlannedAction(
                    plan=record,
                    key=f"upgrade:{pid}",
                    kind=PlannedAction.Kind.FACILITY_UPGRADE,
                    rack=racks[pid],
                    starts_on=phase["start"],
                    ends_on=phase["end"],
                    detail=f"{upgrades[pid]['kind']}: {upgrades[pid]['lead_time_source']}",
                )
            )
    for placement in result["placements"]:
        pid = placement["position_id"]
        nodes = placement["nodes"]
        actions.append(
            PlannedAction(
                plan=record,
                key=f"intake:{placement['rack_id']}",
                kind=PlannedAction.Kind.NODE_INTAKE,
                rack=racks[pid],
                node_type=target,
                nodes=nodes,
                gpus=nodes * target.gpus_per_node,
                starts_on=placement["land"],
                ends_on=placement["in_service"],
                detail=f"land {nodes} {target.slug} nodes, burn in, cut over; in service {placement['in_service']}",
            )
        )
    drains = drain_starts(record)
    release = timedelta(days=params["drain_days"] + params["sanitise_days"] + params["ship_days"])
    for node in nodes_to_decommission(record, target):
        start = drains[str(node.rack_id)]
        actions.append(
            PlannedAction(
                plan=record,
                key=f"decommission:{node.id}",
                kind=PlannedAction.Kind.DECOMMISSION,
                rack=racks[str(node.rack_id)],
                node=node,
                node_type=node.node_type,
                nodes=1,
                gpus=node.node_type.gpus_per_node,
                starts_on=start,
                ends_on=start + release,
                detail=f"drain {params['drain_days']} d, sanitise {params['sanitise_days']} d (NIST SP 800-88), "
                f"ship {params['ship_days']} d",
            )
        )
    PlannedAction.objects.bulk_create(actions, ignore_conflicts=True, batch_size=2000)
    before = {"status": record.status}
    record.status = MigrationPlan.Status.APPLIED
    record.applied_at = timezone.now()
    record.save(update_fields=["status", "applied_at", "updated_at"])
    counts = {k: sum(1 for a in actions if a.kind == k) for k in PlannedAction.Kind.values}
    record_audit(
        actor=actor,
        action="migration_plan.apply",
        target=record,
        before=before,
        after={"status": record.status, "actions": counts},
        reason="scheduled the plan's facility upgrades, node intakes and decommissions",
    )
    return record, len(actions)


def seed_demo_plan(stdout) -> None:
    """`make demo`: one plan over the seeded fleet with the form's defaults, so /plans/ has something to read."""
    if MigrationPlan.objects.exists():
        stdout.write("  migration plan already there")
        return
    if not Node.objects.exists():
        stdout.write("  no fleet to plan; skipped the migration plan")
        return
    record = create_plan(parameters={}, actor="system:demo")
    if record.result is None:  # a large seeded fleet: a worker computes it
        stdout.write(f"  migration plan: {record.computation}, computed by the Celery worker")
    else:
        stdout.write(f"  migration plan: {record.result['headline']}")
