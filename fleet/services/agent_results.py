"""Recording what a node's agent reports about the work it was asked to do."""

from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from fleet.choices import AgentAction, AgentActionState
from fleet.models import NodeAgentAction
from fleet.services.sanitization import record_sanitization_from_agent


class UnknownAction(Exception):
    """No such action for this node (another node's action is treated the same)."""


@dataclass(frozen=True)
class Recorded:
    action: NodeAgentAction
    duplicate: bool


@transaction.atomic
def record_action_result(
    *,
    node_id,
    action_id,
    action: str,
    status: str,
    detail: str = "",
    output: dict | None = None,
    finished_at: datetime | None = None,
) -> Recorded:
    """Record an action's outcome once. Agents replay results after outages, so a second
    report of a finished action changes nothing; the reconciler acts on the stored outcome."""
    row = NodeAgentAction.objects.select_for_update().filter(pk=action_id, node_id=node_id, action=action).first()
    if row is None:
        raise UnknownAction(action_id)
    if row.state != AgentActionState.PENDING:
        return Recorded(row, duplicate=True)
    if status == AgentActionState.SUCCEEDED and _delivers_access(row) and not _ready(output):
        # Delivering a tenant's access succeeds only with the agent's word that the node is
        # reachable and what it checked: a bare "done" (an older agent) is not "ready".
        status = AgentActionState.FAILED
        detail = f"{row.action} reported success without the readiness facts (ready, access, facts); {detail}"
    row.state = status
    row.detail = detail[:10_000]
    row.output = output or {}
    row.finished_at = finished_at or timezone.now()
    row.save(update_fields=["state", "detail", "output", "finished_at"])
    if row.action == AgentAction.SANITIZE_DRIVE:
        # the erase's evidence becomes the drive's NIST SP 800-88 record (retire is gated on it)
        record_sanitization_from_agent(row)
    return Recorded(row, duplicate=False)


def _delivers_access(row: NodeAgentAction) -> bool:
    return row.action == AgentAction.SYNC_ACCESS or (
        row.action == AgentAction.PROVISION and isinstance(row.params, dict) and bool(row.params.get("access"))
    )


def _ready(output: dict | None) -> bool:
    output = output if isinstance(output, dict) else {}
    access = output.get("access")
    return output.get("ready") is True and isinstance(access, dict) and bool(access.get("revision"))
