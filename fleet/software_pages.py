"""Console pages of the fleet's software: the drift page, the node page's software section, and
the rollout pages."""

from django.shortcuts import render

from core.decorators import operator_required

from .models import Node, NodeBringUp
from .selectors import drift_for_nodes, drift_report, golden_baselines, node_software
from .services.bring_up import steps_for


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
