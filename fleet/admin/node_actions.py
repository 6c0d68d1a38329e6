"""The node admin's bulk actions (cordon, uncordon, drain) ask first: a page names the nodes,
the allocations on them and the tenants a drain would move off, and nothing runs until it is
confirmed. Then each node goes the console's way, through perform_operator_action (the one
permission table, the node's event trail and the audit)."""

from django.contrib import messages
from django.contrib.admin import helpers
from django.db.models import Count, Max, Q
from django.template.response import TemplateResponse

from core.services.audit import actor_label
from core.services.permissions import PermissionMissing, require_permission

from ..services.lifecycle import InvalidTransition
from ..services.operator_actions import REGISTRY, ActionRefused, perform_operator_action

SHOWN = 200  # nodes listed by name on the page; the counts cover the whole selection
CONSEQUENCES = {
    "cordon": "No new allocation is placed on these nodes; tenants already on them stay.",
    "uncordon": "These nodes can take new allocations again; a pending drain request is cleared.",
    "drain": "Cordoned, and every tenant allocation on them is moved off by the drain deadline: "
    "the tenants below lose these nodes.",
}


def _live(prefix: str = "allocation_memberships") -> Q:
    return Q(**{f"{prefix}__ended_at__isnull": True, f"{prefix}__isnull": False})


def confirmation_context(queryset) -> dict:
    """What the page shows: the first SHOWN nodes (with the tenant on each), the allocations on
    the selection with their tenants, and the totals. Three queries, whatever the selection."""
    membership = "allocation_memberships"
    nodes = list(
        queryset.order_by("hostname")
        .values("pk", "hostname", "lifecycle", "cordoned", "rack__name")
        .annotate(
            tenant=Max(f"{membership}__allocation__tenant__slug", filter=_live()),
            allocation=Max(f"{membership}__allocation__name", filter=_live()),
        )[:SHOWN]
    )
    allocations = list(
        queryset.model.objects.filter(pk__in=queryset.values("pk"))
        .filter(_live())
        .values(
            f"{membership}__allocation_id",
            f"{membership}__allocation__name",
            f"{membership}__allocation__tenant__slug",
            f"{membership}__allocation__tenant__name",
        )
        .annotate(nodes=Count("pk"))
        .order_by(f"{membership}__allocation__tenant__slug", f"{membership}__allocation__name")
    )
    rows = [
        {
            "id": a[f"{membership}__allocation_id"],
            "name": a[f"{membership}__allocation__name"],
            "tenant_slug": a[f"{membership}__allocation__tenant__slug"],
            "tenant_name": a[f"{membership}__allocation__tenant__name"],
            "nodes": a["nodes"],
        }
        for a in allocations
    ]
    total = queryset.count()
    return {
        "nodes": nodes,
        "nodes_hidden": max(total - len(nodes), 0),
        "total": total,
        "allocations": rows,
        "tenants": sorted({r["tenant_slug"] for r in rows}),
    }


def confirm_or_run(model_admin, request, queryset, action: str):
    """First POST (from the changelist): the confirmation page. Second POST (`confirm=yes`): run."""
    handler = REGISTRY[action]
    try:
        require_permission(request.user, handler.ops_action)  # refuse before asking, not after
    except PermissionMissing as exc:
        model_admin.message_user(request, exc.detail, messages.ERROR)
        return None
    if request.POST.get("confirm") != "yes":
        context = {
            **model_admin.admin_site.each_context(request),
            "opts": model_admin.model._meta,
            "title": f"{handler.label or action.title()} {queryset.count()} node(s)?",
            "action": action,
            "action_name": request.POST.get("action", ""),
            "consequence": CONSEQUENCES.get(action, ""),
            "selected": request.POST.getlist(helpers.ACTION_CHECKBOX_NAME),
            "select_across": request.POST.get("select_across", "0"),
            **confirmation_context(queryset),
        }
        return TemplateResponse(request, "admin/fleet/node_action_confirm.html", context)
    reason = (request.POST.get("reason") or "").strip()[:200] or "admin bulk action"
    done, refused = 0, []
    for node_id, hostname in queryset.values_list("pk", "hostname"):
        try:
            perform_operator_action(
                node_id=node_id, action=action, actor=actor_label(request.user), reason=reason, user=request.user
            )
            done += 1
        except (InvalidTransition, ActionRefused) as exc:
            refused.append(f"{hostname}: {exc.detail}")
        except PermissionMissing as exc:
            model_admin.message_user(request, exc.detail, messages.ERROR)
            return None
    if done:
        model_admin.message_user(request, f"{action}: {done} node(s) done.", messages.SUCCESS)
    for line in refused[:20]:
        model_admin.message_user(request, line, messages.WARNING)
    if len(refused) > 20:
        model_admin.message_user(request, f"… and {len(refused) - 20} more refused.", messages.WARNING)
    return None
