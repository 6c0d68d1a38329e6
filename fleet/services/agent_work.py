"""Asking a node's agent to do work, and recording what it reports back."""

from collections.abc import Iterable

from django.db import IntegrityError, transaction
from django.utils import timezone

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
    """Batch form for loops: one query to find what is already pending, one INSERT for the rest."""
    nodes = list(nodes)
    already = set(
        NodeAgentAction.objects.filter(
            node__in=nodes, action=action, drive__isnull=True, state=AgentActionState.PENDING
        ).values_list("node_id", flat=True)
    )
    rows = [
        NodeAgentAction(node=n, action=action, params=params or {}, requested_by=actor, reason=reason)
        for n in nodes
        if n.pk not in already
    ]
    NodeAgentAction.objects.bulk_create(rows, ignore_conflicts=True)
    return len(rows)


@transaction.atomic
def cancel_pending_actions(*, node: Node, actions: Iterable[str] | None = None) -> int:
    qs = NodeAgentAction.objects.filter(node=node, state=AgentActionState.PENDING)
    if actions is not None:
        qs = qs.filter(action__in=list(actions))
    return qs.update(state=AgentActionState.CANCELLED, finished_at=timezone.now())
