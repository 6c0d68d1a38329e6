"""Fleet console pages (thin: selectors compute, templates show)."""
from django.core.paginator import Paginator
from django.shortcuts import render

from core.api.lookups import parse_uuid
from core.decorators import operator_required

from .choices import LIFECYCLE_COLORS, Lifecycle
from .selectors import gpu_totals_by_lifecycle_and_generation, halls_for_filter, rack_rows, racks_with_power

RACKS_PER_PAGE = 100


@operator_required
def rack_list(request):
    hall_id = parse_uuid(request.GET.get("hall"))
    paginator = Paginator(racks_with_power(hall_id=hall_id), RACKS_PER_PAGE)
    page = paginator.get_page(request.GET.get("page"))
    return render(request, "fleet/rack_list.html", {
        "nav": "fleet",
        "page": page,
        "rows": rack_rows(page.object_list),
        "halls": halls_for_filter(),
        "hall_id": str(hall_id or ""),
        "colors": {str(k): v for k, v in LIFECYCLE_COLORS.items()},
    })


@operator_required
def overview(request):
    rows = gpu_totals_by_lifecycle_and_generation()
    total = sum(r["gpus"] for r in rows)
    by_state: dict[str, int] = {}
    for r in rows:
        by_state[r["lifecycle"]] = by_state.get(r["lifecycle"], 0) + r["gpus"]
    return render(request, "fleet/overview.html", {
        "nav": "overview",
        "total_gpus": total,
        "by_state": [(Lifecycle(s).label, s, n) for s, n in sorted(by_state.items(), key=lambda kv: -kv[1])],
        "rows": rows,
    })


# --- node lifecycle pages: node list, node page, operator actions ---------------------------

NODES_PER_PAGE = 100


def _node_filters(params) -> dict:
    """Console filters; unknown values are ignored rather than failing the page."""
    from .choices import Health

    filters = {name: params.get(name) or None for name in ("site", "rack", "generation")}
    filters["hall"] = parse_uuid(params.get("hall"))
    filters["lifecycle"] = params.get("lifecycle") if params.get("lifecycle") in Lifecycle.values else None
    filters["health"] = params.get("health") if params.get("health") in Health.values else None
    filters["cordoned"] = {"true": True, "false": False}.get(params.get("cordoned") or "")
    return filters


@operator_required
def node_list(request):
    from .choices import Health
    from .selectors import node_list as select_nodes

    filters = _node_filters(request.GET)
    paginator = Paginator(select_nodes(filters).order_by("hostname"), NODES_PER_PAGE)
    page = paginator.get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    return render(request, "fleet/node_list.html", {
        "nav": "fleet", "page": page, "filters": filters, "query": query.urlencode(),
        "halls": halls_for_filter(), "lifecycles": Lifecycle.choices, "healths": Health.choices,
    })


@operator_required
def node_detail(request, pk):
    from django.http import Http404

    from .models import Node
    from .selectors import conditions_for_nodes, drives_for_nodes, live_allocation_ids, pending_agent_actions
    from .services.node_actions import available_actions

    node = Node.objects.select_related("rack__hall__site", "node_type", "fabric_domain").filter(
        pk=parse_uuid(pk)).first()
    if node is None:
        raise Http404("no such node")
    return render(request, "fleet/node_detail.html", {
        "nav": "fleet", "node": node,
        "gpus": node.gpus.order_by("index"),
        "drives": drives_for_nodes([node.pk]).get(node.pk, []),
        "conditions": conditions_for_nodes([node.pk]).get(node.pk, []),
        "allocation_id": live_allocation_ids([node.pk]).get(node.pk),
        "pending": pending_agent_actions(node),
        "events": node.events.order_by("-at", "-id")[:100],
        "actions": available_actions(node, request.user),
    })


@operator_required
def node_action(request, pk):
    from django.contrib import messages
    from django.shortcuts import redirect
    from django.http import Http404
    from django.views.decorators.http import require_POST

    from core.services.audit import actor_label

    from .models import Node
    from .services.lifecycle import InvalidTransition
    from .services.node_actions import ActionRefused, perform_node_action

    @require_POST
    def run(request):
        action = request.POST.get("action", "")
        try:
            perform_node_action(node_id=parse_uuid(pk), action=action, actor=actor_label(request.user),
                                reason=request.POST.get("reason", "").strip(), user=request.user)
        except Node.DoesNotExist:
            raise Http404("no such node") from None
        except KeyError:
            messages.error(request, f"Unknown action {action!r}; use one of the buttons shown.")
        except (InvalidTransition, ActionRefused) as exc:
            messages.error(request, exc.detail)
        except PermissionError as exc:
            messages.error(request, f"{exc}; ask an administrator for it.")
        else:
            messages.success(request, f"{action} done.")
        return redirect("fleet:node-detail", pk=pk)

    return run(request)
