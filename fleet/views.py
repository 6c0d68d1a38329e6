"""Fleet console pages (thin: selectors compute, templates show)."""

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.utils import timezone
from django.views.decorators.http import require_POST

from core.api.lookups import parse_uuid, uuid_or_404
from core.decorators import console_action, operator_required, permission_denied_page
from core.errors import DomainError
from core.reference_data import parameter
from core.services.audit import actor_label
from core.services.permissions import PermissionMissing
from health.selectors import conditions_for_nodes, what_is_wrong_now
from tenants.selectors import live_allocation_ids

from . import charts, drawings
from .choices import HEALTH_COLORS, LIFECYCLE_COLORS, POWER_ACTION_RESULT, Health, Lifecycle, PowerAction
from .dashboards import FIGURES
from .filters import NodeFilterSet
from .models import Hall, Node, Rack
from .pdf import pdf_response
from .selectors import (
    HOT_FRACTION,
    POWER_READING_FRESH,
    bmc_status,
    certificate_for,
    drives_for_nodes,
    fleet_summary,
    gpu_telemetry,
    hall_power,
    halls_for_filter,
    live_tenancy,
    node_power,
    pending_agent_actions,
    placement_headroom,
    rack_elevation,
    rack_load_fraction,
    rack_rows,
    racks_with_draw,
    racks_with_power,
    validation_history,
)
from .selectors import node_list as select_nodes
from .services.drive_gate import RETIRE, RMA, gate_status
from .services.lifecycle import InvalidTransition
from .services.operator_actions import (
    REGISTRY,
    ActionRefused,
    available_actions,
    perform_operator_action,
)
from .services.power_actions import perform_power_action
from .software_pages import node_software_context

DEFAULT_REFRESH_SECONDS = 30
HOT_RACKS_SHOWN = 100

RACKS_PER_PAGE = 100


@operator_required
def rack_list(request):
    hall_id = parse_uuid(request.GET.get("hall"))
    paginator = Paginator(racks_with_power(hall_id=hall_id), RACKS_PER_PAGE)
    page = paginator.get_page(request.GET.get("page"))
    return render(
        request,
        "fleet/rack_list.html",
        {
            "nav": "fleet",
            "page": page,
            "rows": rack_rows(page.object_list),
            "halls": halls_for_filter(),
            "hall_id": str(hall_id or ""),
            "colors": {str(k): v for k, v in LIFECYCLE_COLORS.items()},
        },
    )


def _refresh_seconds(request) -> int:
    """Charts refresh every 30 s; `?refresh=N` (2-3600) lets an operator pick another period."""
    try:
        return min(3600, max(2, int(request.GET.get("refresh", DEFAULT_REFRESH_SECONDS))))
    except ValueError:
        return DEFAULT_REFRESH_SECONDS


@operator_required
def overview(request):
    now = timezone.now()
    summary = fleet_summary(now)  # the power figures ride on the same scan of the nodes
    return render(
        request,
        "fleet/overview.html",
        {
            "nav": "overview",
            "summary": summary,
            "it_kw": summary.it_kw,
            "power_sources": summary.power_sources,
            "figures": {
                # the state chart reuses the summary already computed above instead of querying again
                "gpus-by-state": charts.gpus_by_state(summary.by_state),
                **{name: FIGURES[name](now) for name in ("utilisation-24h", "utilisation-30d")},
            },
            "refresh": _refresh_seconds(request),
            "generated_at": now,
            "now": what_is_wrong_now(now),
        },
    )


@operator_required
def now_tiles(request):
    """The overview's "what is wrong now" tiles alone, for the page to refresh them in place."""
    now = timezone.now()
    return render(request, "fleet/_now_tiles.html", {"now": what_is_wrong_now(now), "generated_at": now})


@operator_required
def chart_json(request, name: str):
    """A dashboard figure as plotly JSON, for charts.js to redraw in place."""
    builder = FIGURES.get(name)
    if builder is None:
        raise Http404(f"no chart called {name!r}")
    response = HttpResponse(builder(timezone.now()).to_json(), content_type="application/json")
    response["Cache-Control"] = "no-store"
    return response


@operator_required
def power(request):
    now = timezone.now()
    racks = [r for r in racks_with_draw(now=now) if r.node_count]
    for r in racks:
        r.load_pct = round(100 * rack_load_fraction(r), 1)
    hot = sorted((r for r in racks if r.load_pct >= 100 * float(HOT_FRACTION)), key=lambda r: -r.load_pct)
    halls = hall_power(now=now)
    headroom, options = placement_headroom()
    nodes = sum(h.nodes for h in halls)
    return render(
        request,
        "fleet/power.html",
        {
            "nav": "fleet",
            "halls": halls,
            "hot_racks": hot[:HOT_RACKS_SHOWN],
            "hot_count": len(hot),
            "racks_with_nodes": len(racks),
            "hot_pct": int(100 * HOT_FRACTION),
            "headroom": headroom,
            "options": options,
            "nodes": nodes,
            "readings": sum(h.sources.nodes - h.sources.rated for h in halls),
            "host_share_note": "H100: " + parameter("host_kw_max_dgx_h100").value + " kW per node",
            "fresh_minutes": int(POWER_READING_FRESH.total_seconds() // 60),
            "figures": {name: FIGURES[name](now) for name in ("hall-power", "rack-load", "power-24h", "power-30d")},
            "refresh": _refresh_seconds(request),
            "pue_source": parameter("pue_industry_average"),
        },
    )


@operator_required
def floor_map(request, hall_id):
    hall = get_object_or_404(Hall.objects.select_related("site"), pk=uuid_or_404(hall_id))
    color_by = "health" if request.GET.get("color") == "health" else "power"
    now = timezone.now()
    cells = [
        drawings.FloorCell(
            rack_id=r.pk,
            name=r.name,
            row=r.row,
            column=r.column,
            load=rack_load_fraction(r),
            drawn_kw=r.drawn,
            usable_kw=float(r.usable_kw),
            nodes=r.node_count,
            health=drawings.worst_health(
                nodes=r.node_count, unhealthy=r.unhealthy, degraded=r.degraded, unknown=r.unknown
            ),
        )
        for r in racks_with_draw(now=now, hall_id=hall.pk)
    ]
    return render(
        request,
        "fleet/floor_map.html",
        {
            "nav": "fleet",
            "hall": hall,
            "halls": halls_for_filter(),
            "color_by": color_by,
            "svg": drawings.floor_map_svg(
                hall_name=str(hall), columns=hall.grid_columns, cells=cells, color_by=color_by
            ),
            "legend": drawings.legend(color_by),
            "rack_count": len(cells),
            "hot_count": sum(1 for c in cells if c.nodes and c.load >= float(HOT_FRACTION)),
        },
    )


@operator_required
def rack_detail(request, rack_id):
    try:
        rack, nodes = rack_elevation(uuid_or_404(rack_id))
    except Rack.DoesNotExist:
        raise Http404("no such rack") from None
    placed_kw = sum(n.node_type.node_kw for n in nodes)
    return render(
        request,
        "fleet/rack_detail.html",
        {
            "nav": "fleet",
            "rack": rack,
            "nodes": nodes,
            "placed_kw": placed_kw,
            "svg": drawings.rack_elevation_svg(rack_name=rack.name, u_height=rack.u_height, nodes=nodes),
            "lifecycle_legend": sorted({(LIFECYCLE_COLORS[n.lifecycle], Lifecycle(n.lifecycle).label) for n in nodes}),
            "health_legend": [(HEALTH_COLORS[h], h.label) for h in Health],
        },
    )


# --- node lifecycle pages: node list, node page, operator actions ---------------------------

NODES_PER_PAGE = 100


@operator_required
def node_list(request):

    filterset = NodeFilterSet(request.GET, queryset=select_nodes({}))
    if filterset.is_valid():
        nodes = filterset.qs
    else:  # the same validation as the API: say what is wrong instead of listing everything
        for error in filterset.errors_as_list():
            messages.error(request, f"Filter {error['field']}: {error['message']}")
        nodes = select_nodes({}).none()
    filters = filterset.normalised()
    paginator = Paginator(nodes.order_by("hostname"), NODES_PER_PAGE)
    page = paginator.get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    return render(
        request,
        "fleet/node_list.html",
        {
            "nav": "fleet",
            "page": page,
            "filters": filters,
            "query": query.urlencode(),
            "halls": halls_for_filter(),
            "lifecycles": Lifecycle.choices,
            "healths": Health.choices,
        },
    )


@operator_required
def node_detail(request, pk):

    node = (
        Node.objects.select_related("rack__hall__site", "node_type", "fabric_domain").filter(pk=parse_uuid(pk)).first()
    )
    if node is None:
        raise Http404("no such node")
    gate = gate_status([node.pk], RMA if node.lifecycle == Lifecycle.TRIAGE else RETIRE)[node.pk]
    now = timezone.now()
    wall_kw, wall_source, read_at = node_power(node, now)
    return render(
        request,
        "fleet/node_detail.html",
        {
            "nav": "fleet",
            "node": node,
            "wall": {
                "kw": round(wall_kw, 2),
                "source": wall_source,
                "age_s": int((now - read_at).total_seconds()) if read_at else None,
            },
            "telemetry": gpu_telemetry(node, node.gpus.order_by("index"), now),
            "telemetry_fresh_s": POWER_READING_FRESH.total_seconds(),
            "drives": drives_for_nodes([node.pk]).get(node.pk, []),
            "gate": gate,
            "runs": validation_history(node.pk),
            "conditions": conditions_for_nodes([node.pk]).get(node.pk, []),
            "allocation_id": live_allocation_ids([node.pk]).get(node.pk),
            "held": live_tenancy([node.pk]).get(node.pk, []),
            "pending": pending_agent_actions(node),
            "events": node.events.order_by("-at", "-id")[:100],
            "actions": available_actions(node, request.user),
            **node_software_context(node),
            "power": bmc_status(node),
            "power_actions": PowerAction.choices,
        },
    )


# What each power action does to the node, said on the confirmation page before it runs.
POWER_CONSEQUENCES = {
    PowerAction.POWER_ON: "switches the node on through its BMC.",
    PowerAction.POWER_OFF: "asks the operating system to shut down; whatever runs there stops.",
    PowerAction.FORCE_OFF: "cuts the node's power at once, like holding the power button: unsaved work is lost.",
    PowerAction.GRACEFUL_RESTART: "asks the operating system to restart; whatever runs there stops for minutes.",
    PowerAction.FORCE_RESTART: "resets the node at once without shutting down: unsaved work is lost.",
    PowerAction.POWER_CYCLE: "turns the node off and on again at once: unsaved work is lost, the GPUs re-initialise.",
}


@operator_required
@console_action("node.power")
def node_power_action(request, pk):
    """GET: the confirmation (names the node, what it carries, what the action does).
    POST with confirm=yes: record the action and send it to the BMC; the node page shows the
    BMC's answer and, as the power sync sees it, the power state moving."""
    node = Node.objects.filter(pk=parse_uuid(pk)).select_related("node_type").first()
    if node is None:
        raise Http404("no such node")
    action = request.POST.get("action") or request.GET.get("action", "")
    if action not in PowerAction.values:
        messages.error(request, f"Unknown power action {action!r}; use one of the power buttons.")
        return redirect("fleet:node-detail", pk=pk)
    if request.method == "POST" and request.POST.get("confirm") == "yes":
        try:
            done = perform_power_action(
                node=node,
                action=action,
                actor=actor_label(request.user),
                reason=request.POST.get("reason", "").strip()[:2000],
                user=request.user,
            )
        except PermissionMissing as exc:
            return permission_denied_page(request, exc)
        except DomainError as exc:
            messages.error(request, exc.detail)
        else:
            if done.state == "failed":
                messages.error(request, f"{done.get_action_display()} failed: {done.detail}")
            else:
                messages.success(
                    request,
                    f"{done.get_action_display()}: {done.bmc_response or 'queued'}. The power sync confirms it "
                    f"once the BMC reports the node {POWER_ACTION_RESULT[action]}.",
                )
        return redirect("fleet:node-detail", pk=pk)
    return render(
        request,
        "fleet/node_power_confirm.html",
        {
            "nav": "fleet",
            "node": node,
            "action": action,
            "label": PowerAction(action).label,
            "consequence": POWER_CONSEQUENCES[action],
            "allocation_id": live_allocation_ids([node.pk]).get(node.pk),
            "power": bmc_status(node),
        },
    )


@operator_required
def node_action(request, pk):

    @require_POST
    def run(request):
        action = request.POST.get("action", "")
        handler = REGISTRY.get(action)
        if handler is not None and handler.consequence and request.POST.get("confirmed") != "yes":
            return _confirm_node_action(request, pk, handler)
        try:
            perform_operator_action(
                node_id=parse_uuid(pk),
                action=action,
                actor=actor_label(request.user),
                reason=request.POST.get("reason", "").strip(),
                user=request.user,
                force=request.POST.get("force") == "yes",
            )
        except Node.DoesNotExist:
            raise Http404("no such node") from None
        except KeyError:
            messages.error(request, f"Unknown action {action!r}; use one of the buttons shown.")
        except (InvalidTransition, ActionRefused) as exc:
            messages.error(request, exc.detail)
        except PermissionMissing as exc:
            return permission_denied_page(request, exc)
        else:
            messages.success(request, f"{action} done.")
        return redirect("fleet:node-detail", pk=pk)

    return run(request)


def _confirm_node_action(request, pk, handler):
    """The question before a destructive action: what it does, to which node, whose workload."""
    node = Node.objects.select_related("node_type", "rack").filter(pk=parse_uuid(pk)).first()
    if node is None:
        raise Http404("no such node")
    held = live_tenancy([node.pk]).get(node.pk, [])
    return render(
        request,
        "fleet/node_action_confirm.html",
        {
            "nav": "fleet",
            "node": node,
            "action": handler,
            "held": held,
            "needs_force": bool(held) and handler.refuses_allocated,
            "reason": request.POST.get("reason", "").strip(),
        },
    )


@operator_required
def certificate(request, pk):
    try:
        cert = certificate_for(parse_uuid(pk))
    except Node.DoesNotExist:
        raise Http404("no such node") from None
    return render(request, "fleet/certificate.html", {"nav": "fleet", **cert}, status=200 if cert["complete"] else 409)


@operator_required
def certificate_pdf(request, pk):
    """The same certificate as a PDF (WeasyPrint), only once it is complete."""
    try:
        cert = certificate_for(parse_uuid(pk))
    except Node.DoesNotExist:
        raise Http404("no such node") from None
    if not cert["complete"]:
        return render(request, "fleet/certificate.html", {"nav": "fleet", **cert}, status=409)
    html = render_to_string("fleet/certificate_pdf.html", cert, request=request)
    return pdf_response(html, f"certificate-{cert['node'].hostname}.pdf")
