"""The node events an import or an admin edit records (enrolment, inventory update)."""

from django.utils import timezone

from core.context import current_request_id
from fleet.models import (
    Node,
    NodeEvent,
)


def record_enrolment(node: Node, *, actor: str, reason: str) -> NodeEvent:
    """A node added one at a time (the admin's add form) gets the same enrol event as an import."""
    return NodeEvent.objects.create(
        node=node,
        at=timezone.now(),
        actor=actor,
        action="enrol",
        from_state="",
        to_state=node.lifecycle,
        reason=reason,
        request_id=current_request_id(),
    )


def record_inventory_update(node: Node, *, actor: str, changes: dict) -> NodeEvent:
    return NodeEvent.objects.create(
        node=node,
        at=timezone.now(),
        actor=actor,
        action="inventory_update",
        from_state=node.lifecycle,
        to_state=node.lifecycle,
        reason="admin: " + ", ".join(f"{k} {a} → {b}" for k, (a, b) in changes.items()),
        request_id=current_request_id(),
    )
