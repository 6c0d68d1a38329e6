"""Console pages for generation migration plans (thin: services plan, selectors read, charts draw)."""
from __future__ import annotations

import re

import plotly.io as pio
from django.contrib import messages
from django.core.paginator import Paginator
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from core.decorators import console_action, operator_required
from core.services.audit import actor_label
from fleet.migration_charts import capacity_gpus_figure, capacity_perf_figure, power_figure
from fleet.models import Hall, MigrationPlan, NodeType
from fleet.plan_selectors import plan_list as plan_list_query
from fleet.plan_selectors import scheduled_work, verdict_groups
from fleet.services.migration_inputs import PlanInputError, default_parameters, reference_citations
from fleet.services.migration_plans import PlanNotApplicable, apply_plan, create_plan, recompute

PLANS_PER_PAGE = 50
_NUMBER_FIELDS = ("target_perf_per_gpu", "burn_in_days", "cut_over_days", "drain_days", "sanitise_days", "ship_days",
                  "capacity_floor_gpus", "largest_job_gpus", "horizon_weeks")


def _chart_json(fig) -> str:
    # Embedded in a <script type="application/json">: never let the JSON close the tag.
    return pio.to_json(fig, validate=False).replace("</", "<\\/")


def _form_values(params: dict) -> dict:
    """Parameters → the strings the form shows."""
    upgrade = (params.get("facility_upgrades") or [{}])[0] if params.get("facility_upgrades") else {}
    return {
        **{k: "" if params.get(k) is None else params[k] for k in ("name", "start", "target_node_type", *_NUMBER_FIELDS)},
        "halls": params.get("halls", []),
        "deliveries": "\n".join(
            ", ".join(str(x) for x in (d["date"], d["scalable_units"], d["racks_per_unit"], d.get("label", ""))).rstrip(", ")
            for d in params.get("deliveries", [])
        ),
        "cdu_positions": " ".join(upgrade.get("positions", [])),
        "cdu_start": upgrade.get("earliest_start") or "",
        "cdu_lead_time_days": "" if upgrade.get("lead_time_days") is None else upgrade["lead_time_days"],
        "cdu_kw_after": "" if upgrade.get("power_kw_after") is None else upgrade["power_kw_after"],
    }


def _parameters_from_post(post) -> tuple[dict, list[dict]]:
    """The form's strings → API parameters (the service validates them like an API body)."""
    params: dict = {"halls": post.getlist("halls")}
    for key in ("name", "start", "target_node_type"):
        if post.get(key, "").strip():
            params[key] = post[key].strip()
    for key in _NUMBER_FIELDS:
        value = post.get(key, "").strip()
        if value:
            params[key] = value
        elif key == "burn_in_days":
            params[key] = None
    errors = []
    deliveries = []
    for n, line in enumerate(post.get("deliveries", "").splitlines(), start=1):
        if not line.strip():
            continue
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 3:
            errors.append({"field": "deliveries", "message": f"line {n}: write 'date, scalable units, racks per unit[, label]'"})
            continue
        deliveries.append({"date": parts[0], "scalable_units": parts[1], "racks_per_unit": parts[2],
                           "label": parts[3] if len(parts) > 3 else ""})
    if deliveries:
        params["deliveries"] = deliveries
    positions = [p for p in re.split(r"[\s,]+", post.get("cdu_positions", "")) if p]
    if positions:
        upgrade = {"kind": "cdu_install", "positions": positions}
        for form_key, key in (("cdu_start", "earliest_start"), ("cdu_lead_time_days", "lead_time_days"),
                              ("cdu_kw_after", "power_kw_after")):
            if post.get(form_key, "").strip():
                upgrade[key] = post[form_key].strip()
        params["facility_upgrades"] = [upgrade]
    else:
        params["facility_upgrades"] = []
    return params, errors


@operator_required
def plan_list(request):
    page = Paginator(plan_list_query(), PLANS_PER_PAGE).get_page(request.GET.get("page"))
    return render(request, "fleet/plans/list.html", {"nav": "plans", "page": page})


@operator_required
@console_action("migration_plan.create")
def plan_create(request):
    errors: list[dict] = []
    if request.method == "POST":
        params, errors = _parameters_from_post(request.POST)
        if not errors:
            try:
                plan = create_plan(parameters=params, actor=actor_label(request.user))
            except PlanInputError as exc:
                errors = exc.errors
            else:
                return redirect("fleet:plan-detail", pk=plan.id)
        values = _form_values(params)
        values["deliveries"] = request.POST.get("deliveries", "")
        values["cdu_positions"] = request.POST.get("cdu_positions", "")
        for key in ("cdu_start", "cdu_lead_time_days", "cdu_kw_after"):
            values[key] = request.POST.get(key, "")
    else:
        values = _form_values(default_parameters())
    return render(request, "fleet/plans/form.html", {
        "nav": "plans", "values": values, "errors": errors,
        "halls": Hall.objects.select_related("site").order_by("site__name", "name"),
        "node_types": NodeType.objects.order_by("generation", "slug"),
        "citations": reference_citations(),
    }, status=400 if errors else 200)


@operator_required
def plan_detail(request, pk):
    record = get_object_or_404(MigrationPlan, pk=pk)
    result = record.result
    params = record.inputs["parameters"]
    hall_names = {h["id"]: h["name"] for h in record.inputs["resolved"]["halls"]}
    context = {
        "nav": "plans", "plan": record, "result": result, "params": params, "hall_names": hall_names,
        "verdict_rows": verdict_groups(result["position_verdicts"], hall_names),
        "verdict_counts": {s: sum(1 for v in result["position_verdicts"] if v["status"] == s)
                           for s in ("ok_now", "after_upgrade", "never")},
        "naive": result["naive"],
        "work": scheduled_work(record) if record.status == MigrationPlan.Status.APPLIED else [],
        "citations": reference_citations(),
    }
    if record.feasible:
        plan = recompute(record)
        context["charts"] = {
            "chart-gpus": _chart_json(capacity_gpus_figure(plan, params["capacity_floor_gpus"])),
            "chart-perf": _chart_json(capacity_perf_figure(plan, params.get("capacity_floor_perf"))),
            "chart-power": _chart_json(power_figure(plan)),
        }
    return render(request, "fleet/plans/detail.html", context)


@operator_required
@require_POST
@console_action("migration_plan.apply")
def plan_apply(request, pk):
    record = get_object_or_404(MigrationPlan, pk=pk)
    try:
        record, created = apply_plan(plan_id=record.id, actor=actor_label(request.user))
    except PlanNotApplicable as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Plan applied: {created} actions scheduled." if created
                         else "This plan was already applied; nothing new was scheduled.")
    return redirect("fleet:plan-detail", pk=pk)
