"""Operator actions on nodes, MAAS `node_action.py` style.

Each action is a class that declares its name, the lifecycle states it is allowed from and
the permission it needs; `execute()` does the work through `transition()` and services, and
every action leaves a node event. `perform_node_action()` is the one entry point for the
console, the admin and `POST /api/v1/ops/nodes/{id}/actions`.
"""
from typing import ClassVar

from django.db import transaction

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
    permission: ClassVar[str] = "fleet.change_node"
    needs_uncordoned: ClassVar[bool] = False

    def is_allowed(self, node: Node) -> bool:
        return node.lifecycle in self.allowed_states

    def execute(self, node: Node, *, actor: str, reason: str) -> Node:  # pragma: no cover - abstract
        raise NotImplementedError


REGISTRY: dict[str, NodeAction] = {}


def register(cls: type[NodeAction]) -> type[NodeAction]:
    REGISTRY[cls.name] = cls()
    return cls


def available_actions(node: Node, user=None) -> list[NodeAction]:
    """What the console shows as buttons: only what the node's state (and the user) allows."""
    return [a for a in REGISTRY.values() if a.is_allowed(node) and (user is None or user.has_perm(a.permission))]


@transaction.atomic
def perform_node_action(*, node_id, action: str, actor: str, reason: str = "", user=None) -> Node:
    """Lock the node, check the action is allowed, run it. Raises KeyError for an unknown action,
    PermissionError, InvalidTransition (→ 409 invalid_transition) or ActionRefused."""
    handler = REGISTRY.get(action)
    if handler is None:
        raise KeyError(action)
    if user is not None and not user.has_perm(handler.permission):
        raise PermissionError(f"{action} needs the {handler.permission} permission")
    node = Node.objects.select_for_update().select_related("node_type").get(pk=node_id)
    if not handler.is_allowed(node):
        allowed = sorted(handler.allowed_states)
        raise InvalidTransition(node, action, f"{action} is not allowed while {node.hostname} is {node.lifecycle}; "
                                              f"it is allowed from: {', '.join(allowed)}.")
    return handler.execute(node, actor=actor, reason=reason)
