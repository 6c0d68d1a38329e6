"""The operator actions on nodes and the one entry point that runs them.

`perform_operator_action()` is used by the console, the admin and
`POST /api/v1/ops/nodes/{id}/actions`: it locks the node, checks the action's permission and
allowed states, and runs it; every action leaves a node event and an audit row.
"""

from django.db import transaction

from core.services.permissions import has_permission, require_permission
from fleet.models import Node
from fleet.selectors import live_tenancy

from . import end_of_life_actions, lifecycle_actions
from .action_base import ActionRefused, OperatorAction
from .lifecycle import InvalidTransition

__all__ = [
    "ACTION_CLASSES",
    "REGISTRY",
    "ActionRefused",
    "OperatorAction",
    "available_actions",
    "perform_operator_action",
]


# Every operator action, in the order the console shows them. One explicit list: adding an
# action means adding it here.
ACTION_CLASSES: tuple[type[OperatorAction], ...] = (
    lifecycle_actions.Cordon,
    lifecycle_actions.Uncordon,
    lifecycle_actions.Drain,
    lifecycle_actions.StartBringUp,
    lifecycle_actions.StartBurnIn,
    lifecycle_actions.Validate,
    lifecycle_actions.Remediate,
    lifecycle_actions.Triage,
    lifecycle_actions.Repair,
    lifecycle_actions.Rma,
    lifecycle_actions.Decommission,
    end_of_life_actions.Sanitize,
    end_of_life_actions.Retire,
    end_of_life_actions.Dispose,
)
REGISTRY: dict[str, OperatorAction] = {cls.name: cls() for cls in ACTION_CLASSES}
# An action missing from the permission table (core.services.permissions) fails here, at import.
_PERMISSIONS = {name: action.permission for name, action in REGISTRY.items()}


def available_actions(node: Node, user=None) -> list[OperatorAction]:
    """What the console shows as buttons: only what the node's state (and the user) allows."""
    return [a for a in REGISTRY.values() if a.is_allowed(node) and (user is None or has_permission(user, a.ops_action))]


@transaction.atomic
def perform_operator_action(
    *, node_id, action: str, actor: str, reason: str = "", user=None, force: bool = False
) -> Node:
    """Lock the node, check the action is allowed, run it. Raises KeyError for an unknown action,
    PermissionMissing, InvalidTransition (→ 409 invalid_transition) or ActionRefused.

    `user` is whoever asked (console, admin, API token's user) and is checked against the
    permission table; None only for system callers (control loops, set-up code)."""
    handler = REGISTRY.get(action)
    if handler is None:
        raise KeyError(action)
    if user is not None:
        require_permission(user, handler.ops_action)
    node = Node.objects.select_for_update().select_related("node_type").get(pk=node_id)
    refusal = handler.refusal(node)
    if refusal is not None:
        raise InvalidTransition(node, action, refusal)
    if handler.refuses_allocated and not force:
        held = live_tenancy([node.pk]).get(node.pk)
        if held:
            names = ", ".join(f"{h['allocation']} of tenant {h['tenant']}" for h in held)
            raise ActionRefused(
                "node_allocated",
                f"{node.hostname} is allocated ({names}); {action} would take it from the tenant. "
                f"Drain it first, or repeat the request with force to {action} it anyway.",
                extra={"allocations": [{**h, "allocation_id": str(h["allocation_id"])} for h in held]},
            )
    return handler.execute(node, actor=actor, reason=reason)
