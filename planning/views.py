"""Console pages for plans: generation migration plans and disposition plans (thin: services
plan, selectors read, charts draw)."""

from __future__ import annotations

import json

import plotly.io as pio
from django.contrib import messages
from django.core.paginator import Paginator
from django.http import JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from core.api.lookups import parse_uuid, uuid_or_404
from core.api.problems import Problem
from core.decorators import console_action, operator_required, permission_denied_page
from core.services.audit import actor_label
from core.services.permissions import PermissionMissing, require_permission
from fleet.choices import CustodyDestination
from fleet.models import Hall, Node, NodeType
from fleet.selectors import data_handling_status, halls_for_filter, live_tenancy
from fleet.services import bmc_disposal, sanitization
from fleet.services.lifecycle import InvalidTransition
from fleet.services.operator_actions import ActionRefused, perform_operator_action
from planning.api.serializers import CapacityPlanIn, DispositionPlanIn, field_errors, plan_parameters
from planning.api.views import create_capacity_from, create_plan_from, migration_from_capacity
from planning.charts import (
    capacity_gpus_figure,
    capacity_need_figure,
    capacity_perf_figure,
    capacity_power_figure,
    power_figure,
)
from planning.disposition_charts import block_figures, split_figure
from planning.engines.capacity import PRECISIONS, reference_models
from planning.forms import (
    CAPACITY_MONTHS,
    CUSTOM_MODEL,
    DEFAULT_DEMANDS,
    DEMAND_ROWS,
    capacity_body_from_post,
    disposition_body_from_post,
    flat_errors,
    migration_form_values,
    migration_parameters_from_post,
)
from planning.inputs import PlanInputError, default_parameters
from planning.models import CapacityPlan, DispositionPlan, MigrationPlan
from planning.selectors import apply_preview, drain_groups, reference_citations, scheduled_work, verdict_groups
from planning.selectors import plan_list as plan_list_query
from planning.services.disposition_plans import default_market
from planning.services.migration_plans import (
    PlanNotApplicable,
    apply_plan,
    create_plan,
)

PLANS_PER_PAGE = 50


def _chart_json(fig) -> str:
    # Embedded in a <script type="application/json">: never let the JSON close the tag.
    return pio.to_json(fig, validate=False).replace("</", "<\\/")


def _figure_data(fig) -> dict:
    """A figure as plain data for ``json_script`` (which escapes it for the page)."""
    return json.loads(pio.to_json(fig, validate=False))


@operator_required
def migration_list(request):
    page = Paginator(plan_list_query(), PLANS_PER_PAGE).get_page(request.GET.get("page"))
    return render(request, "planning/migration_list.html", {"nav": "plans", "page": page})


@operator_required
@console_action("migration_plan.create")
def migration_create(request):
    errors: list[dict] = []
    if request.method == "POST":
        params, errors = migration_parameters_from_post(request.POST)
        if not errors:
            try:
                plan = create_plan(parameters=plan_parameters(params), actor=actor_label(request.user))
            except PlanInputError as exc:
                errors = exc.errors
            else:
                return redirect("planning:migration-plan-detail", pk=plan.id)
        values = migration_form_values(params)
        values["deliveries"] = request.POST.get("deliveries", "")
        values["cdu_positions"] = request.POST.get("cdu_positions", "")
        for key in ("cdu_start", "cdu_lead_time_days", "cdu_kw_after"):
            values[key] = request.POST.get(key, "")
    else:
        values = migration_form_values(default_parameters())
    return render(
        request,
        "planning/migration_form.html",
        {
            "nav": "plans",
            "values": values,
            "errors": errors,
            "halls": Hall.objects.select_related("site").order_by("site__name", "name"),
            "node_types": NodeType.objects.order_by("generation", "slug"),
            "citations": reference_citations(),
        },
        status=400 if errors else 200,
    )


@operator_required
def migration_detail(request, pk):
    record = get_object_or_404(MigrationPlan, pk=pk)
    params = record.inputs["parameters"]
    if record.computation != MigrationPlan.Computation.DONE:
        return render(
            request,
            "planning/migration_computing.html",
            {"nav": "plans", "plan": record, "params": params, "racks": len(record.inputs["resolved"]["positions"])},
        )
    result = record.result
    hall_names = {h["id"]: h["name"] for h in record.inputs["resolved"]["halls"]}
    context = {
        "nav": "plans",
        "plan": record,
        "result": result,
        "params": params,
        "hall_names": hall_names,
        "verdict_rows": verdict_groups(result["position_verdicts"], hall_names),
        "verdict_counts": {
            s: sum(1 for v in result["position_verdicts"] if v["status"] == s)
            for s in ("ok_now", "after_upgrade", "never")
        },
        "naive": result["naive"],
        "drain_rows": drain_groups(result.get("drains", [])),
        "work": scheduled_work(record) if record.status == MigrationPlan.Status.APPLIED else [],
        "citations": reference_citations(),
    }
    if record.feasible:
        # Drawn from the stored result: the planner does not run again to show a plan.
        context["charts"] = {
            "chart-gpus": _chart_json(capacity_gpus_figure(result, params["capacity_floor_gpus"])),
            "chart-perf": _chart_json(capacity_perf_figure(result, params.get("capacity_floor_perf"))),
            "chart-power": _chart_json(power_figure(result)),
        }
    return render(request, "planning/migration_detail.html", context)


@operator_required
def migration_progress(request, pk):
    """Where a plan's computation stands, for the plan page to poll (no page reload)."""
    record = get_object_or_404(MigrationPlan.objects.only("id", "computation", "progress", "computation_error"), pk=pk)
    return JsonResponse(
        {
            "computation": record.computation,
            "computation_display": record.get_computation_display(),
            "progress": record.progress,
            "error": record.computation_error,
            "url": reverse("planning:migration-plan-detail", kwargs={"pk": record.pk}),
        }
    )


@operator_required
@require_http_methods(["GET", "POST"])
@console_action("migration_plan.apply")
def migration_apply(request, pk):
    """GET: what applying schedules (upgrades, intakes, decommissions, tenants holding those
    nodes); POST: schedule it."""
    record = get_object_or_404(MigrationPlan, pk=pk)
    if request.method == "GET":
        if record.status != MigrationPlan.Status.DRAFT or not record.feasible:
            return redirect("planning:migration-plan-detail", pk=pk)
        return render(
            request,
            "planning/migration_apply_confirm.html",
            {"nav": "plans", "plan": record, "preview": apply_preview(record)},
        )
    try:
        record, created = apply_plan(plan_id=record.id, actor=actor_label(request.user))
    except PlanNotApplicable as exc:
        messages.error(request, str(exc))
    else:
        messages.success(
            request,
            f"Plan applied: {created} actions scheduled."
            if created
            else "This plan was already applied; nothing new was scheduled.",
        )
    return redirect("planning:migration-plan-detail", pk=pk)


# ---- disposition plans

NODES_PER_PAGE = 100


@operator_required
@console_action("disposition_plan.create")
def disposition_list(request):
    errors, form = [], None
    if request.method == "POST":
        form = request.POST
        body = DispositionPlanIn(data=disposition_body_from_post(request.POST))
        if body.is_valid():
            try:
                plan = create_plan_from(body.validated_data, actor=actor_label(request.user))
                return redirect("planning:disposition-plan-detail", pk=plan.pk)
            except Problem as exc:
                errors = [f"{e['field']}: {e['message']}" for e in exc.errors]
        else:
            errors = [f"{field}: {msg}" for field, msg in flat_errors(body.errors)]
    plans = DispositionPlan.objects.only("id", "name", "created_by", "created_at", "result")[:50]
    return render(
        request,
        "planning/disposition_list.html",
        {
            "nav": "plans",
            "plans": plans,
            "halls": halls_for_filter(),
            "errors": errors,
            "form": form,
            "demand_rows": [
                (i, *(DEFAULT_DEMANDS[i] if i < len(DEFAULT_DEMANDS) and form is None else ("", "", "", "", "")))
                for i in range(DEMAND_ROWS)
            ],
            "channels": ("broker", "auction", "distressed"),
            "market": default_market().as_list(),
            "migration_plans": MigrationPlan.objects.filter(computation=MigrationPlan.Computation.DONE)
            .only("id", "name", "created_at")
            .order_by("-created_at")[:20],
        },
    )


@operator_required
def disposition_detail(request, pk):
    plan = get_object_or_404(DispositionPlan, pk=uuid_or_404(pk))
    assignments = plan.assignments.select_related("node", "node__rack").order_by("node__hostname")
    page = Paginator(assignments, NODES_PER_PAGE).get_page(request.GET.get("page"))
    status = data_handling_status([a.node_id for a in page.object_list])
    held = live_tenancy([a.node_id for a in page.object_list])
    rows = [(a, status[a.node_id], held.get(a.node_id, [])) for a in page.object_list]
    result = plan.result
    return render(
        request,
        "planning/disposition_plan.html",
        {
            "nav": "plans",
            "plan": plan,
            "result": result,
            "page": page,
            "rows": rows,
            "custody_kinds": CUSTODY_KINDS,
            "split_rows": [
                (o, result["split"][o], result["option_returns"][o], result["freed_power_value"][o])
                for o in result["split"]
            ],
            "figures": {
                "split": _figure_data(split_figure(result)),
                "returns": [{"block": label, "figure": _figure_data(fig)} for label, fig in block_figures(result)],
            },
        },
    )


NODE_STEPS = {"bmc_reset": bmc_disposal.reset_bmc_for_disposal, "asset_tags": sanitization.record_asset_tags_removed}
# The permission-table action of each button on the plan page.
PLAN_PAGE_ACTIONS = {
    "bmc_reset": "node.record_bmc_reset",
    "asset_tags": "node.record_asset_tags_removed",
    "custody": "node.record_custody_transfer",
    "sanitize": "node.sanitize",
    "retire": "node.retire",
    "dispose": "node.dispose",
}


# The kinds of party a custody transfer from the plan page may name (NIST SP 800-88 per kind:
# core/reference/sanitisation.csv); an RMA shipment is recorded from the node's API instead.
CUSTODY_KINDS = {
    v: label
    for v, label in CustodyDestination.choices
    if v not in (CustodyDestination.UNSPECIFIED, CustodyDestination.RMA_VENDOR)
}


# The plan page's steps that cannot be undone, and what each does (asked before it runs).
CONFIRMED_ACTIONS = {
    "sanitize": "erases every drive of these nodes (NIST SP 800-88): nothing on them can be recovered",
    "retire": "retires these nodes: they never return to service",
    "dispose": "records these nodes as gone to the party in their custody records",
}


@operator_required
@require_POST
def disposition_node_action(request, pk):
    """Run one checklist step or lifecycle action on the nodes ticked on the plan page."""
    action = request.POST.get("action", "")
    if action in PLAN_PAGE_ACTIONS:
        try:
            require_permission(request.user, PLAN_PAGE_ACTIONS[action])
        except PermissionMissing as exc:
            return permission_denied_page(request, exc)
    plan = get_object_or_404(DispositionPlan, pk=uuid_or_404(pk))
    ids = [i for i in (parse_uuid(v) for v in request.POST.getlist("node")) if i]
    nodes = list(Node.objects.filter(pk__in=ids, disposition_assignments__plan=plan))
    actor = actor_label(request.user)
    if not nodes:
        messages.error(request, "Tick at least one node of this plan, then choose the action again.")
        return redirect("planning:disposition-plan-detail", pk=plan.pk)
    if action in CONFIRMED_ACTIONS and request.POST.get("confirmed") != "yes":
        held = live_tenancy([n.pk for n in nodes])
        return render(
            request,
            "planning/disposition_confirm.html",
            {
                "nav": "plans",
                "plan": plan,
                "action": action,
                "consequence": CONFIRMED_ACTIONS[action],
                "rows": [(n, held.get(n.pk, [])) for n in sorted(nodes, key=lambda n: n.hostname)],
                "held_count": sum(1 for n in nodes if n.pk in held),
            },
        )
    force = request.POST.get("force") == "yes"
    done, refused = 0, []
    for node in nodes:
        try:
            if action in NODE_STEPS:
                NODE_STEPS[action](node=node, actor=actor, reason=f"disposition plan {plan.name}")
            elif action == "custody":
                to_party = request.POST.get("to_party", "").strip()
                ref = request.POST.get("document_ref", "").strip()
                kind = request.POST.get("destination_kind", "")
                if not to_party or not ref or kind not in CUSTODY_KINDS:
                    messages.error(
                        request,
                        "A custody transfer needs the receiving party, the kind of party and a document reference.",
                    )
                    break
                sanitization.record_custody_transfer(
                    node=node,
                    from_party=node.rack.hall.site.name,
                    to_party=to_party,
                    destination_kind=kind,
                    document_ref=ref,
                    actor=actor,
                )
            elif action in ("sanitize", "retire", "dispose"):
                perform_operator_action(
                    node_id=node.pk,
                    action=action,
                    actor=actor,
                    reason=f"disposition plan {plan.name}",
                    user=request.user,
                    force=force,
                )
            else:
                messages.error(request, f"Unknown action {action!r}.")
                break
            done += 1
        except (ActionRefused, InvalidTransition, sanitization.CustodyRefused) as exc:
            refused.append(f"{node.hostname}: {exc}")
    if done:
        messages.success(request, f"{action.replace('_', ' ')}: done on {done} node(s).")
    for line in refused[:10]:
        messages.warning(request, line)
    if len(refused) > 10:
        messages.warning(request, f"... and {len(refused) - 10} more refused.")
    return redirect("planning:disposition-plan-detail", pk=plan.pk)


# ---- capacity plans

CAPACITY_PER_PAGE = 50


@operator_required
@console_action("capacity_plan.create")
def capacity_list(request):
    errors: list[dict] = []
    if request.method == "POST":
        body = CapacityPlanIn(data=capacity_body_from_post(request.POST))
        if body.is_valid():
            try:
                plan = create_capacity_from(body.validated_data, actor=actor_label(request.user))
            except Problem as exc:
                errors = exc.errors or [{"field": "non_field_errors", "message": str(exc.detail)}]
            else:
                return redirect("planning:capacity-plan-detail", pk=plan.pk)
        else:
            errors = field_errors(body.errors)
    page = Paginator(
        CapacityPlan.objects.defer("inputs", "result").order_by("-created_at"), CAPACITY_PER_PAGE
    ).get_page(request.GET.get("page"))
    return render(
        request,
        "planning/capacity_list.html",
        {
            "nav": "plans",
            "page": page,
            "errors": errors,
            "models": reference_models(),
            "precisions": PRECISIONS,
            "months": range(CAPACITY_MONTHS),
            "custom_model": CUSTOM_MODEL,
            "form": request.POST if request.method == "POST" else {},
        },
        status=400 if errors else 200,
    )


@operator_required
def capacity_detail(request, pk):
    plan = get_object_or_404(CapacityPlan.objects.select_related("migration_plan"), pk=pk)
    charts = {
        "chart-need": _chart_json(capacity_need_figure(plan.result)),
        "chart-kw": _chart_json(capacity_power_figure(plan.result)),
    }
    return render(
        request,
        "planning/capacity_detail.html",
        {"nav": "plans", "plan": plan, "result": plan.result, "charts": charts},
    )


@operator_required
@console_action("capacity_plan.to_migration")
@require_POST
def capacity_to_migration(request, pk):
    plan = get_object_or_404(CapacityPlan, pk=pk)
    try:
        migration = migration_from_capacity(plan.pk, actor=actor_label(request.user))
    except Problem as exc:
        messages.error(request, str(exc.detail))
        return redirect("planning:capacity-plan-detail", pk=pk)
    return redirect("planning:migration-plan-detail", pk=migration.pk)
