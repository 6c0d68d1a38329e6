"""Asking a node's agent to do work, and recording what it reports back."""

from collections.abc import Iterable

from django.db import IntegrityError, router, transaction
from django.utils import timezone

from core.bulk import insert_values
from fleet.choices import AgentActionState
from fleet.models import Node, NodeAgentAction


@transaction.atomic
def request_agent_action(
    *, node: Node, action: str, actor: str, params: dict | None = None, drive=None, reason: str = ""
) -> NodeAgentAction:
    """Queue `action` for the node's agent, or return the one already pending (idempotent)."""
    pending = NodeAgentAction.objects.filter(node=node, action=action, drive=drive, state=AgentActionState.PENDING)
    existing = pending.first()
    if existing:
        return existing
    try:
        with transaction.atomic():
            return NodeAgentAction.objects.create(
                node=node, action=action, params=params or {}, drive=drive, requested_by=actor, reason=reason
            )
    except IntegrityError:  # a concurrent request queued it first
        return pending.get()


@transaction.atomic(savepoint=False)  # all-or-nothing in the caller's transaction; no extra round trips
def request_agent_actions(
    *, nodes: Iterable[Node], action: str, actor: str, params: dict | None = None, reason: str = ""
) -> int:
    """Batch form for loops: one INSERT that skips the nodes with this action already pending
    (the database's one-pending-per-kind constraint decides, so a concurrent request cannot
    queue it twice) and returns how many it queued."""
    rows = [{"node_id": n.pk} for n in nodes]
    queued = insert_values(
        NodeAgentAction,
        rows,
        using=router.db_for_write(NodeAgentAction),
        shared={
            "action": action,
            "params": params or {},
            "drive_id": None,
            "state": AgentActionState.PENDING,
            "requested_by": actor,
            "reason": reason,
        },
        ignore_conflicts=True,
        returning=True,
    )
    return len(queued)


@transaction.atomic
def cancel_pending_actions(*, node: Node, actions: Iterable[str] | None = None) -> int:
    qs = NodeAgentAction.objects.filter(node=node, state=AgentActionState.PENDING)
    if actions is not None:
        qs = qs.filter(action__in=list(actions))
    return qs.update(state=AgentActionState.CANCELLED, finished_at=timezone.now())
