"""What an operator action is (MAAS `node_action.py` style): a class declaring its name, the
lifecycle states it is allowed from and the permission it needs; `execute()` does the work
through `transition()` and services. The registry of every action is in operator_actions.py.

"Operator action" is what a person (or the health loop acting for one) asks of a node;
a work item for the node's agent is a `NodeAgentAction` (fleet/services/agent_work.py).
"""

from typing import ClassVar

from core.errors import Conflict
from core.services.permissions import permission_for
from fleet.models import Node


class ActionRefused(Conflict):
    """An action that is allowed from this state but blocked by something else
    (e.g. `sanitization_incomplete`). `code` is the API's problem code."""

    def __init__(self, code: str, detail: str, extra: dict | None = None):
        super().__init__(detail, code=code, extra=extra)


class OperatorAction:
    name: ClassVar[str]
    label: ClassVar[str]
    allowed_states: ClassVar[frozenset[str]]
    needs_uncordoned: ClassVar[bool] = False
    # Guard-rails. `consequence` (set) makes the console ask first, saying what will happen;
    # `refuses_allocated` makes the action refuse a node a tenant holds unless the caller says
    # `force` (console and API alike, in perform_operator_action).
    consequence: ClassVar[str] = ""
    refuses_allocated: ClassVar[bool] = False

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
        return (
            f"{self.name} is not allowed while {node.hostname} is {node.lifecycle}; "
            f"it is allowed from: {', '.join(allowed)}."
        )

    def execute(self, node: Node, *, actor: str, reason: str) -> Node:  # pragma: no cover - abstract
        raise NotImplementedError
