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
    row.state = status
    row.detail = detail[:10_000]
    row.output = output or {}
    row.finished_at = finished_at or timezone.now()
    row.save(update_fields=["state", "detail", "output", "finished_at"])
    if row.action == AgentAction.SANITIZE_DRIVE:
        # the erase's evidence becomes the drive's NIST SP 800-88 record (retire is gated on it)
        record_sanitization_from_agent(row)
    return Recorded(row, duplicate=False)
