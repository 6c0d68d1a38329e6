"""Operator actions on nodes, MAAS `node_action.py` style.

Each action is a class that declares its name, the lifecycle states it is allowed from and
the permission it needs; `execute()` does the work through `transition()` and services, and
every action leaves a node event. `perform_node_action()` is the one entry point for the
console, the admin and `POST /api/v1/ops/nodes/{id}/actions`.
"""
from typing import ClassVar

from django.db import transaction

from core.services.permissions import has_permission, permission_for, require_permission
from fleet.models import Node

from .lifecycle import InvalidTransition


class ActionRefused(Exception):
    """An action that is allowed from this state but blocked by something else
    (e.g. `sanitization_incomplete`). `code` is the API's problem code."""

    def __init__(self, code: str, detail: str, extra: dict | None = None):
        self.code = code
        self.detail = detail
        self.extra = extra or {}
        super().__init__(detail)


class NodeAction:
    name: ClassVar[str]
    label: ClassVar[str]
    allowed_states: ClassVar[frozenset[str]]
    needs_uncordoned: ClassVar[bool] = False

    @property
    def ops_action(self) -> str:
        return f"node.{self.name}"

    @property
    def permission(self) -> str:
        """From the one table (core.services.permissions.OPS_ACTIONS)."""
        return permission_for(self.ops_action)

    def is_allowed(self, node: Node) -> bool:
        return self.refusal(node) is None

    def refusal(self, node: Node) -> str | None:
        """Why this action cannot run on `node` now (None when it can): the 409 detail."""
        if node.lifecycle in self.allowed_states:
            return None
        allowed = sorted(self.allowed_states)
        return (f"{self.name} is not allowed while {node.hostname} is {node.lifecycle}; "
                f"it is allowed from: {', '.join(allowed)}.")

    def execute(self, node: Node, *, actor: str, reason: str) -> Node:  # pragma: no cover - abstract
        raise NotImplementedError


REGISTRY: dict[str, NodeAction] = {}


def register(cls: type[NodeAction]) -> type[NodeAction]:
    action = cls()
    action.permission  # noqa: B018  an action missing from the permission table fails at import
    REGISTRY[cls.name] = action
    return cls


def available_actions(node: Node, user=None) -> list[NodeAction]:
    """What the console shows as buttons: only what the node's state (and the user) allows."""
    return [a for a in REGISTRY.values() if a.is_allowed(node) and (user is None or has_permission(user, a.ops_action))]


@transaction.atomic
def perform_node_action(*, node_id, action: str, actor: str, reason: str = "", user=None) -> Node:
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
    return handler.execute(node, actor=actor, reason=reason)


# The operator actions of the lifecycle (cordon, drain, burn-in, validation, repair, end of
# life) register themselves on import; end-of-life disposition actions live in their own module.
from . import operator_actions  # noqa: E402,F401  (registration side effect)
