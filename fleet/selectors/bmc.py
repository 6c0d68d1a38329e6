"""Reads of the BMC records and power actions (never their credentials)."""

from fleet.choices import PowerActionState
from fleet.models import BMCPowerAction, Node, NodeBMC

RECENT_POWER_ACTIONS = 10
# The enrol event of a node discovered through its BMC names where (fleet.services.bmc_enrolment).
BMC_ENROLMENT_REASON_PREFIX = "discovered at "


def bmc_status(node: Node) -> dict:
    """The node's BMC record, its open power action and the last ones: three queries."""
    bmc = NodeBMC.objects.filter(node=node).first()
    recent = list(BMCPowerAction.objects.filter(node=node).order_by("-created_at")[:RECENT_POWER_ACTIONS])
    open_action = next((a for a in recent if a.state in (PowerActionState.PENDING, PowerActionState.ACCEPTED)), None)
    return {"bmc": bmc, "power_state": node.power_state, "open_action": open_action, "actions": recent}


def bmc_reachability_counts() -> dict:
    """{reachable, unreachable, unknown, drifting} over every BMC record (one query each way)."""
    rows = NodeBMC.objects.values_list("reachable", "drift_since")
    counts = {"reachable": 0, "unreachable": 0, "unknown": 0, "drifting": 0}
    for reachable, drift_since in rows:
        counts["unknown" if reachable is None else "reachable" if reachable else "unreachable"] += 1
        counts["drifting"] += drift_since is not None
    return counts


def bmc_enrolled_nodes():
    """Nodes enrolled from a BMC (their enrol event names the BMC), with their BMC record and type:
    the rows behind `GET /api/v1/ops/bmc-enrolments`, one query per page."""
    return Node.objects.filter(
        events__action="enrol", events__reason__startswith=BMC_ENROLMENT_REASON_PREFIX
    ).select_related("bmc", "node_type", "rack")
