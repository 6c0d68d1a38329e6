"""Console pages of the fleet's software: the drift page, the node page's software section, and
the rollout pages."""

from django.contrib import messages
from django.http import Http404
from django.shortcuts import redirect, render

from core.api.lookups import parse_uuid
from core.decorators import console_action, operator_required
from core.errors import DomainError
from core.services.audit import actor_label

from .api.serializers import RolloutControlIn, RolloutIn
from .models import Node, NodeBringUp, SoftwareBaseline
from .selectors import (
    drift_for_nodes,
    drift_report,
    golden_baselines,
    node_software,
    rollout_detail,
    rollouts_with_counts,
)
from .services.bring_up import steps_for
from .services.rollouts import control_rollout, create_rollout


def node_software_context(node: Node) -> dict:
    """What the node page shows of the node's stack: inventory, drift, and its bring-up ladder."""
    bring_up = NodeBringUp.objects.filter(node=node).first()
    return {
        "software": node_software(node.pk),
        "software_drift": drift_for_nodes([node]).get(node.pk),
        "golden": golden_baselines([node.node_type_id]).get(node.node_type_id),
        "bring_up": bring_up,
        "ladder": [s.name for s in steps_for(node.node_type)],
    }


@operator_required
def drift(request):
    report = drift_report()
    return render(
        request,
        "fleet/software_drift.html",
        {"nav": "fleet", "by_component": report.by_component(), "report": report},
    )


def _form_errors(serializer) -> list[str]:
    return [f"{field}: {' '.join(str(m) for m in messages)}" for field, messages in serializer.errors.items()]


@operator_required
@console_action("rollout.create")
def rollout_list(request):
    """Rollouts, and the form that starts one (same checks as POST /api/v1/ops/rollouts)."""
    errors: list[str] = []
    if request.method == "POST":
        body = RolloutIn(data={k: v for k, v in request.POST.items() if v != "" and k != "csrfmiddlewaretoken"})
        if body.is_valid():
            data = dict(body.validated_data)
            baseline = SoftwareBaseline.objects.select_related("node_type").filter(pk=data.pop("baseline_id")).first()
            if baseline is None:
                errors = ["baseline: no such baseline; choose one from the list."]
            else:
                try:
                    rollout = create_rollout(baseline=baseline, actor=actor_label(request.user), **data)
                    messages.success(request, f"Rollout {rollout.name} started.")
                    return redirect("fleet:rollout-detail", pk=rollout.pk)
                except DomainError as exc:
                    errors = [exc.detail]
        else:
            errors = _form_errors(body)
    return render(
        request,
        "fleet/rollout_list.html",
        {
            "nav": "fleet",
            "rollouts": rollouts_with_counts(),
            "baselines": SoftwareBaseline.objects.select_related("node_type").order_by(
                "node_type__slug", "-created_at"
            ),
            "errors": errors,
            "form": request.POST if request.method == "POST" else None,
        },
    )


@operator_required
@console_action("rollout.control")
def rollout_detail_page(request, pk):
    rollout = rollout_detail(parse_uuid(pk))
    if rollout is None:
        raise Http404("no such rollout")
    if request.method == "POST":
        body = RolloutControlIn(data=request.POST)
        if not body.is_valid():
            messages.error(request, "; ".join(_form_errors(body)))
        else:
            try:
                control_rollout(rollout=rollout, actor=actor_label(request.user), **body.validated_data)
                messages.success(request, f"Rollout {body.validated_data['action']}d.")
            except DomainError as exc:
                messages.error(request, exc.detail)
        return redirect("fleet:rollout-detail", pk=rollout.pk)
    return render(request, "fleet/rollout_detail.html", {"nav": "fleet", "rollout": rollout})
