"""Capacity plans: size the fleet from a forecast and turn the gap into a migration plan's deliveries."""

from __future__ import annotations

from dataclasses import asdict
from datetime import date

from django.db import transaction

from core.services.audit import record_audit
from fleet.models import Node, NodeType
from planning.engines import capacity as cp
from planning.inputs import GONE
from planning.models import CapacityPlan, MigrationPlan
from planning.services.migration_plans import create_plan


class CapacityInputError(ValueError):
    """Inputs the engine cannot size (unknown model or GPU model)."""


def current_gpus(gpu_model: str) -> int:
    """GPUs of ``gpu_model`` in service today (retired and disposed nodes excluded)."""
    nodes = Node.objects.exclude(lifecycle__in=GONE).filter(node_type__gpu_model=gpu_model)
    per_node = NodeType.objects.filter(gpu_model=gpu_model).values_list("gpus_per_node", flat=True).first() or 0
    return nodes.count() * per_node


def _model(data: dict) -> cp.ModelSpec:
    if data.get("model_name"):
        spec = cp.reference_models().get(data["model_name"])
        if spec is None:
            raise CapacityInputError(
                f"no reference model {data['model_name']!r}; known: "
                f"{', '.join(cp.reference_models())}, or give the model's figures"
            )
        return spec
    m = data["model"]
    return cp.ModelSpec(
        m["name"],
        m["total_params_b"],
        m["active_params_b"],
        m["layers"],
        m["kv_heads"],
        m["head_dim"],
        m["bytes_per_element"],
        m["context_tokens"],
    )


def _json(value):
    if isinstance(value, dict):
        return {k: _json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json(v) for v in value]
    if isinstance(value, date):
        return value.isoformat()
    return value


@transaction.atomic
def create_capacity_plan(*, data: dict, actor: str) -> CapacityPlan:
    """Size ``data`` (validated by the API serializer), store the answer with the gap to today's fleet."""
    model = _model(data)
    forecast = tuple(cp.ForecastMonth(**m) for m in data["forecast"])
    target = data["target_gpu_model"]
    measured = {k: (int(v["gpus_per_replica"]), float(v["tokens_per_s"])) for k, v in data.get("measured", {}).items()}
    gpu_models = tuple(dict.fromkeys([target, *data.get("gpu_models", [])]))
    try:
        result = cp.plan_capacity(model, forecast, gpu_models, measured)
    except KeyError as exc:
        raise CapacityInputError(f"no GPU model {exc} in generations.csv") from exc
    existing = current_gpus(target)
    deliveries = cp.gap_deliveries(result, target, existing, data["racks_per_unit"])
    gap = []
    for month in result.months:
        need = next((n for n in month.needs if n.gpu_model == target), None)
        gap.append(
            {
                "month": month.month.isoformat(),
                "needed_gpus": need.gpus if need else None,
                "current_gpus": existing,
                "gap_gpus": max(0, need.gpus - existing) if need else None,
            }
        )
    body = {
        "model": asdict(result.model),
        "kv_bytes_per_token": result.kv_bytes_per_token,
        "weight_gb": result.weight_gb,
        "months": _json([asdict(m) for m in result.months]),
        "target_gpu_model": target,
        "gap": gap,
        "deliveries": deliveries,
        "assumptions": [list(a) for a in result.assumptions],
    }
    record = CapacityPlan.objects.create(name=data["name"], created_by=actor, inputs=_json(data), result=body)
    record_audit(
        actor=actor,
        action="capacity_plan.create",
        target=record,
        after={"name": record.name, "deliveries": len(deliveries)},
    )
    return record


@transaction.atomic
def migration_plan_from_gap(*, plan_id, actor: str) -> MigrationPlan:
    """A migration plan whose deliveries are the capacity plan's gap (raises CapacityInputError)."""
    record = CapacityPlan.objects.select_for_update().get(pk=plan_id)
    if record.migration_plan_id:
        return record.migration_plan
    deliveries = record.result["deliveries"]
    if not deliveries:
        raise CapacityInputError("the current fleet already covers this forecast: there is no gap to deliver")
    node_type = NodeType.objects.filter(gpu_model=record.result["target_gpu_model"]).order_by("slug").first()
    if node_type is None:
        raise CapacityInputError(f"no node type in the catalogue runs {record.result['target_gpu_model']}")
    start = min(date.fromisoformat(d["date"]) for d in deliveries)
    monday = start.fromordinal(start.toordinal() - start.weekday())
    migration = create_plan(
        parameters={
            "name": f"From capacity plan {record.name}"[:100],
            "start": monday.isoformat(),
            "target_node_type": node_type.slug,
            "deliveries": deliveries,
        },
        actor=actor,
    )
    record.migration_plan = migration
    record.save(update_fields=["migration_plan", "updated_at"])
    record_audit(
        actor=actor, action="capacity_plan.to_migration", target=record, after={"migration_plan": str(migration.id)}
    )
    return migration
