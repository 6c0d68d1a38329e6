"""Capacity plans: size the fleet from a forecast and turn the gap into a migration plan in the same unit."""

from __future__ import annotations

import math
from dataclasses import asdict
from datetime import date, timedelta

from django.db import transaction

from core.reference_data import burn_in_deadline
from core.services.audit import record_audit
from fleet.models import Node, NodeType
from planning.engines import capacity as cp
from planning.inputs import GONE, IN_SERVICE
from planning.models import CapacityPlan, MigrationPlan
from planning.services.migration_plans import create_plan

# The migration's default cut-over (days): a delivery must land, burn in and cut over before its month.
CUT_OVER_DAYS = 1


class CapacityInputError(ValueError):
    """Inputs the engine cannot size; ``errors`` is ``[{field, message}]`` as in docs/api.md."""

    def __init__(self, message: str, errors: list[dict] | None = None):
        super().__init__(message)
        self.errors = errors or [{"field": "non_field_errors", "message": message}]


def current_gpus(gpu_model: str) -> int:
    """GPUs of ``gpu_model`` that are not retired or disposed (what occupies racks today)."""
    nodes = Node.objects.exclude(lifecycle__in=GONE).filter(node_type__gpu_model=gpu_model)
    per_node = NodeType.objects.filter(gpu_model=gpu_model).values_list("gpus_per_node", flat=True).first() or 0
    return nodes.count() * per_node


def fleet_gpu_models() -> list[str]:
    """GPU models of the nodes in service today (what a migration from this plan would count)."""
    return sorted(
        set(Node.objects.filter(lifecycle__in=IN_SERVICE).values_list("node_type__gpu_model", flat=True).distinct())
    )


def _model(data: dict) -> cp.ModelSpec:
    if data.get("model_name"):
        spec = cp.reference_models().get(data["model_name"])
        if spec is None:
            raise CapacityInputError(
                f"no reference model {data['model_name']!r}; known: "
                f"{', '.join(cp.reference_models())}, or give the model's figures",
                [
                    {
                        "field": "model_name",
                        "message": f"No reference model {data['model_name']!r}; known: "
                        f"{', '.join(cp.reference_models())}, or give model with its figures.",
                    }
                ],
            )
        return spec
    m = data["model"]
    return cp.ModelSpec(
        name=m["name"],
        total_params_b=m["total_params_b"],
        active_params_b=m["active_params_b"],
        layers=m["layers"],
        attention_heads=m["attention_heads"],
        kv_heads=m["kv_heads"],
        head_dim=m["head_dim"],
        context_tokens=m["context_tokens"],
        precision=m["precision"],
        attention=m["attention"],
        kv_lora_rank=m["kv_lora_rank"],
        qk_rope_head_dim=m["qk_rope_head_dim"],
        routed_experts=m["routed_experts"],
        experts_per_token=m["experts_per_token"],
        expert_params_b=m["expert_params_b"],
    )


def _json(value):
    if isinstance(value, dict):
        return {k: _json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json(v) for v in value]
    if isinstance(value, date):
        return value.isoformat()
    return value


def _check(data: dict, model: cp.ModelSpec, forecast: tuple[cp.ForecastMonth, ...], precision: str) -> None:
    """What needs the model or the reference rows: tokens within the context, GPUs known, measurements plausible."""
    errors: list[dict] = []
    for i, month in enumerate(forecast):
        if month.prompt_tokens + month.output_tokens > model.context_tokens:
            errors.append(
                {
                    "field": f"forecast[{i}].prompt_tokens",
                    "message": f"{month.prompt_tokens:,} prompt + {month.output_tokens:,} output tokens exceed "
                    f"{model.name}'s context of {model.context_tokens:,} tokens.",
                }
            )
    known = set(cp.default_gpu_models())
    for field, gpu_model in [("target_gpu_model", data["target_gpu_model"])] + [
        (f"gpu_models[{i}]", g) for i, g in enumerate(data.get("gpu_models", []))
    ]:
        if gpu_model not in known:
            errors.append(
                {
                    "field": field,
                    "message": f"No GPU model {gpu_model!r} in generations.csv; known: {', '.join(known)}.",
                }
            )
    for gpu_model, m in (data.get("measured") or {}).items():
        if gpu_model not in known:
            errors.append(
                {"field": f"measured.{gpu_model}", "message": f"No GPU model {gpu_model!r} in generations.csv."}
            )
            continue
        if m["confirm_implausible"]:
            continue
        point = cp.Measured(m["gpus_per_replica"], m["tokens_per_s"])
        for month in forecast:
            why = cp.measured_plausible(model, gpu_model, precision, month, point)
            if why:
                errors.append(
                    {
                        "field": f"measured.{gpu_model}.tokens_per_s",
                        "message": f"{why}. Check the measurement, or send confirm_implausible: true to keep it.",
                    }
                )
                break
    if errors:
        raise CapacityInputError("; ".join(e["message"] for e in errors), errors)


def service_lead_weeks() -> int:
    """Weeks a delivery needs before it serves: burn-in (the lifecycle's deadline) and cut-over, whole weeks."""
    days = math.ceil(burn_in_deadline() / timedelta(days=1)) + CUT_OVER_DAYS
    return max(1, math.ceil(days / 7))


def capacity_unit(result: cp.CapacityResult) -> dict:
    """The plan's unit for a migration: output tokens/s of this model at this precision, per GPU of each
    generation sized, at the month of peak demand (its request shape and targets)."""
    peak = max(result.months, key=lambda m: (m.tokens_per_s, m.month))
    shape = f"{peak.prompt_tokens:,}+{peak.output_tokens:,} tokens"
    return {
        "label": f"output tokens/s ({result.model.name}, {result.precision}, {shape})",
        "per_gpu_model": {n.gpu_model: n.tokens_per_s_per_gpu for n in peak.needs},
        "month": peak.month.isoformat(),
        "floor_schedule": [{"start": m.month.isoformat(), "perf": m.tokens_per_s} for m in result.months],
    }


@transaction.atomic
def create_capacity_plan(*, data: dict, actor: str) -> CapacityPlan:
    """Size ``data`` (validated by the API serializer), store the answer with the gap to today's fleet."""
    model = _model(data)
    precision = data.get("precision") or model.precision
    forecast = tuple(cp.ForecastMonth(**m) for m in data["forecast"])
    _check(data, model, forecast, precision)
    target = data["target_gpu_model"]
    measured = {
        k: cp.Measured(int(v["gpus_per_replica"]), float(v["tokens_per_s"]), bool(v["confirm_implausible"]))
        for k, v in (data.get("measured") or {}).items()
    }
    # The target, the generations asked for, and the fleet's own: a migration counts those in this unit.
    gpu_models = tuple(dict.fromkeys([target, *data.get("gpu_models", []), *fleet_gpu_models()]))
    result = cp.plan_capacity(model, forecast, gpu_models, measured, precision)
    existing = current_gpus(target)
    deliveries = cp.gap_deliveries(result, target, existing, data["racks_per_unit"], service_lead_weeks())
    gap = []
    for month in result.months:
        need = next((n for n in month.needs if n.gpu_model == target), None)
        gap.append(
            {
                "month": month.month.isoformat(),
                "needed_gpus": need.gpus if need else None,
                "needed_racks": need.racks if need else None,
                "current_gpus": existing,
                "gap_gpus": max(0, need.gpus - existing) if need else None,
            }
        )
    body = {
        "model": asdict(result.model),
        "precision": result.precision,
        "kv_bytes_per_token": result.kv_bytes_per_token,
        "weight_gb": result.weight_gb,
        "months": _json([asdict(m) for m in result.months]),
        "target_gpu_model": target,
        "gap": gap,
        "deliveries": deliveries,
        "unit": capacity_unit(result),
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
    """A migration plan whose deliveries are the capacity plan's gap, counted in the capacity plan's unit:
    every node type is worth its generation's tokens/s per GPU, and the floor is each month's need
    (raises CapacityInputError)."""
    record = CapacityPlan.objects.select_for_update().get(pk=plan_id)
    if record.migration_plan_id:
        return record.migration_plan
    result = record.result
    deliveries = result["deliveries"]
    if not deliveries:
        raise CapacityInputError("the current fleet already covers this forecast: there is no gap to deliver")
    node_type = NodeType.objects.filter(gpu_model=result["target_gpu_model"]).order_by("slug").first()
    if node_type is None:
        raise CapacityInputError(f"no node type in the catalogue runs {result['target_gpu_model']}")
    unit = result.get("unit")
    if unit is None:
        raise CapacityInputError("this capacity plan was sized before plans kept their unit; size it again")
    per_gpu = {
        slug: unit["per_gpu_model"][gpu_model]
        for slug, gpu_model in NodeType.objects.values_list("slug", "gpu_model")
        if gpu_model in unit["per_gpu_model"]
    }
    start = min(date.fromisoformat(d["date"]) for d in deliveries)
    monday = start - timedelta(days=start.weekday())
    migration = create_plan(
        parameters={
            "name": f"From capacity plan {record.name}"[:100],
            "start": monday.isoformat(),
            "target_node_type": node_type.slug,
            "deliveries": deliveries,
            "workload": "inference",
            "floor_unit": "capacity_unit",
            "capacity_unit": {
                "label": unit["label"][:200],
                "per_gpu": per_gpu,
                "source": f"capacity plan {record.name} ({record.pk}), month {unit['month']}",
            },
            "capacity_floor_schedule": unit["floor_schedule"],
            # Inference replicas fit a node or a rack: the largest-job rule is a training constraint.
            "largest_job_gpus": 1,
        },
        actor=actor,
    )
    record.migration_plan = migration
    record.save(update_fields=["migration_plan", "updated_at"])
    record_audit(
        actor=actor, action="capacity_plan.to_migration", target=record, after={"migration_plan": str(migration.id)}
    )
    return migration
