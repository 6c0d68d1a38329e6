"""Console pages for end of life: disposition plans (create, split, charts, reasoning) with the
per-node data-handling checklist and its actions, and the certificate of sanitisation."""

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from core.api.lookups import parse_uuid, uuid_or_404
from core.api.problems import Problem
from core.decorators import console_action, operator_required, permission_denied_page
from core.services.permissions import PermissionMissing, require_permission
from core.services.audit import actor_label

from .api.eol_urls import DispositionPlanIn, create_plan_from
from .models import DispositionPlan, Node
from .selectors import certificate_for, data_handling_status, halls_for_filter
from .services import sanitization
from .services.lifecycle import InvalidTransition
from .services.node_actions import ActionRefused, perform_node_action

DEMAND_ROWS = 3
NODES_PER_PAGE = 100
DEFAULT_DEMANDS = [("inference", 64, "2.00", "0.80", 24), ("batch", 32, "1.40", "0.70", 24)]


def _form_to_body(post) -> dict:
    demands = []
    for i in range(DEMAND_ROWS):
        pool = post.get(f"pool_{i}", "").strip()
        if pool:
            demands.append({"pool": pool, "nodes_wanted": post.get(f"nodes_{i}"), "value_per_gpu_hour": post.get(f"value_{i}"),
                            "utilisation": post.get(f"util_{i}"), "horizon_months": post.get(f"months_{i}")})
    selection = {k: post.get(k, "").strip() for k in ("generation", "gpu_model")}
    if post.get("hall_id"):
        selection["hall_id"] = post["hall_id"]
    if post.get("min_age_years", "").strip():
        selection["min_age_years"] = post["min_age_years"].strip()
    body = {"name": post.get("name", "").strip(), "selection": selection, "demands": demands,
            "horizon_months": post.get("horizon_months"), "channel": post.get("channel", "broker")}
    if post.get("lease_cap_nodes", "").strip():
        body["lease_cap_nodes"] = post["lease_cap_nodes"].strip()
    return body


@operator_required
@console_action("disposition_plan.create")
def plan_list(request):
    errors, form = [], None
    if request.method == "POST":
        form = request.POST
        body = DispositionPlanIn(data=_form_to_body(request.POST))
        if body.is_valid():
            try:
                plan = create_plan_from(body.validated_data, actor=actor_label(request.user))
                return redirect("fleet:disposition-plan", pk=plan.pk)
            except Problem as exc:
                errors = [f"{e['field']}: {e['message']}" for e in exc.errors]
        else:
            errors = [f"{field}: {msg}" for field, msg in _flat(body.errors)]
    plans = DispositionPlan.objects.only("id", "name", "created_by", "created_at", "result")[:50]
    return render(request, "fleet/disposition_list.html", {
        "nav": "plans", "plans": plans, "halls": halls_for_filter(), "errors": errors, "form": form,
        "demand_rows": [(i, *(DEFAULT_DEMANDS[i] if i < len(DEFAULT_DEMANDS) and form is None else ("", "", "", "", "")))
                        for i in range(DEMAND_ROWS)],
        "channels": ("broker", "auction", "distressed"),
    })


def _flat(errors, prefix=""):
    if isinstance(errors, dict):
        for k, v in errors.items():
            yield from _flat(v, f"{prefix}.{k}" if prefix else k)
    elif isinstance(errors, list):
        for i, v in enumerate(errors):
            if isinstance(v, (dict, list)):
                yield from _flat(v, f"{prefix}[{i}]")
            else:
                yield prefix, str(v)


@operator_required
def plan_detail(request, pk):
    plan = get_object_or_404(DispositionPlan, pk=uuid_or_404(pk))
    assignments = plan.assignments.select_related("node", "node__rack").order_by("node__hostname")
    page = Paginator(assignments, NODES_PER_PAGE).get_page(request.GET.get("page"))
    status = data_handling_status([a.node_id for a in page.object_list])
    rows = [(a, status[a.node_id]) for a in page.object_list]
    result = plan.result
    return render(request, "fleet/disposition_plan.html", {
        "nav": "plans", "plan": plan, "result": result, "page": page, "rows": rows,
        "split_rows": [(o, result["split"][o], result["option_returns"][o], result["freed_power_value"][o])
                       for o in result["split"]],
        "figures": result["figures"],
    })


NODE_STEPS = {"bmc_reset": sanitization.record_bmc_reset, "asset_tags": sanitization.record_asset_tags_removed}
# The permission-table action of each button on the plan page.
PLAN_PAGE_ACTIONS = {"bmc_reset": "node.record_bmc_reset", "asset_tags": "node.record_asset_tags_removed",
                     "custody": "node.record_custody_transfer", "sanitize": "node.sanitize",
                     "retire": "node.retire", "dispose": "node.dispose"}


@operator_required
@require_POST
def plan_node_action(request, pk):
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
        return redirect("fleet:disposition-plan", pk=plan.pk)
    done, refused = 0, []
    for node in nodes:
        try:
            if action in NODE_STEPS:
                NODE_STEPS[action](node=node, actor=actor, reason=f"disposition plan {plan.name}")
            elif action == "custody":
                to_party = request.POST.get("to_party", "").strip()
                ref = request.POST.get("document_ref", "").strip()
                if not to_party or not ref:
                    messages.error(request, "A custody transfer needs the receiving party and a document reference.")
                    break
                sanitization.record_custody_transfer(node=node, from_party=node.rack.hall.site.name, to_party=to_party,
                                                     document_ref=ref, actor=actor)
            elif action in ("sanitize", "retire", "dispose"):
                perform_node_action(node_id=node.pk, action=action, actor=actor,
                                    reason=f"disposition plan {plan.name}", user=request.user)
            else:
                messages.error(request, f"Unknown action {action!r}.")
                break
            done += 1
        except (ActionRefused, InvalidTransition) as exc:
            refused.append(f"{node.hostname}: {exc}")
    if done:
        messages.success(request, f"{action.replace('_', ' ')}: done on {done} node(s).")
    for line in refused[:10]:
        messages.warning(request, line)
    if len(refused) > 10:
        messages.warning(request, f"... and {len(refused) - 10} more refused.")
    return redirect("fleet:disposition-plan", pk=plan.pk)


@operator_required
def certificate(request, pk):
    try:
        cert = certificate_for(parse_uuid(pk))
    except Node.DoesNotExist:
        raise Http404("no such node") from None
    return render(request, "fleet/certificate.html", {"nav": "fleet", **cert},
                  status=200 if cert["complete"] else 409)
