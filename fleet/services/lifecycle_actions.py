"""The lifecycle's operator actions: cordon, uncordon, drain, burn-in, validation, health
repair and decommissioning. Each is a registered `OperatorAction`; `perform_operator_action()` locks
the node and checks `refusal()` before `execute()` runs. Every action writes a node event and
an audit row; lifecycle moves go through `transition()`.
"""

from typing import ClassVar

from django.utils import timezone

from core.services.audit import record_audit
from fleet.choices import AgentAction, Attribution
from fleet.choices import Lifecycle as L
from fleet.models import Node
from fleet.selectors import occupied_node_ids

from .action_base import OperatorAction
from .agent_work import request_agent_action
from .bring_up import start_ladder
from .lifecycle import STATE_TIMEOUTS, TRANSITIONS, record_node_event, transition

# Nothing is done to a node that has left the fleet.
_GONE = frozenset({L.RETIRED, L.DISPOSED})
_IN_FLEET = frozenset(L.values) - _GONE


def _state_snapshot(node: Node) -> dict:
    return {
        "lifecycle": node.lifecycle,
        "cordoned": node.cordoned,
        "cordon_reason": node.cordon_reason,
        "attribution": node.attribution,
        "drain_deadline": node.drain_deadline.isoformat() if node.drain_deadline else None,
    }


def _save_flags(node: Node, *, actor: str, action: str, reason: str, before: dict, fields: list[str]) -> Node:
    node.updated_at = timezone.now()
    node.save(update_fields=[*fields, "updated_at"])
    record_node_event(node, actor=actor, action=action, reason=reason)
    record_audit(
        actor=actor, action=f"node.{action}", target=node, before=before, after=_state_snapshot(node), reason=reason
    )
    return node


def _cordon(node: Node, reason: str) -> list[str]:
    node.cordoned = True
    node.cordon_reason = (reason or "cordoned by an operator")[:200]
    node.attribution = Attribution.PROVIDER
    return ["cordoned", "cordon_reason", "attribution"]


def has_live_allocation(node: Node) -> bool:
    return node.pk in occupied_node_ids([node.pk])


class Cordon(OperatorAction):
    """No new placements on the node; whatever runs there keeps running."""

    name = "cordon"
    label = "Cordon"
    allowed_states = _IN_FLEET

    def refusal(self, node):
        if node.cordoned and node.lifecycle in self.allowed_states:
            return (
                f"{node.hostname} is already cordoned ({node.cordon_reason}); uncordon it first to change the reason."
            )
        return super().refusal(node)

    def execute(self, node, *, actor, reason):
        before = _state_snapshot(node)
        return _save_flags(
            node, actor=actor, action=self.name, reason=reason, before=before, fields=_cordon(node, reason)
        )


class Uncordon(OperatorAction):
    """Placements may use the node again; a pending drain request is withdrawn."""

    name = "uncordon"
    label = "Uncordon"
    allowed_states = _IN_FLEET

    def refusal(self, node):
        if not node.cordoned and node.lifecycle in self.allowed_states:
            return f"{node.hostname} is not cordoned."
        return super().refusal(node)

    def execute(self, node, *, actor, reason):
        before = _state_snapshot(node)
        node.cordoned, node.cordon_reason, node.attribution = False, "", ""
        node.drain_requested_at = node.drain_deadline = None
        return _save_flags(
            node,
            actor=actor,
            action=self.name,
            reason=reason,
            before=before,
            fields=["cordoned", "cordon_reason", "attribution", "drain_requested_at", "drain_deadline"],
        )


class Drain(OperatorAction):
    """Cordon, then get the tenant off. A quarantined node moves to `draining` (the health
    path); a node in use gets a drain request with a deadline that the allocation loop acts on
    (`fleet.selectors.nodes_to_drain()`); an idle node is drained at once (cordoned, still
    `available`)."""

    name = "drain"
    label = "Drain"
    consequence = (
        "cordons the node and moves its tenant's workload off it: the allocation loop replaces the node "
        "(the tenant's job on it is stopped) before the drain deadline"
    )
    allowed_states = frozenset({L.AVAILABLE, L.PROVISIONING, L.ACTIVE, L.QUARANTINED})

    def execute(self, node, *, actor, reason):
        before = _state_snapshot(node)
        fields = _cordon(node, reason or "drained by an operator")
        if has_live_allocation(node):
            now = timezone.now()
            node.drain_requested_at = now
            node.drain_deadline = now + STATE_TIMEOUTS[L.DRAINING]
            fields += ["drain_requested_at", "drain_deadline"]
        _save_flags(node, actor=actor, action=self.name, reason=reason, before=before, fields=fields)
        if node.lifecycle == L.QUARANTINED:
            transition(node, L.DRAINING, actor=actor, action=self.name, reason=reason)
        return node


class TransitionAction(OperatorAction):
    """An action that is one lifecycle move (allowed wherever the table allows that move),
    optionally queueing work for the node's agent."""

    to_state: ClassVar[str]
    agent_action: ClassVar[str | None] = None
    only_from: ClassVar[frozenset[str] | None] = None  # narrower than the table, for operator use

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        sources = frozenset(s for s, targets in TRANSITIONS.items() if cls.to_state in targets)
        cls.allowed_states = sources & cls.only_from if cls.only_from is not None else sources

    def execute(self, node, *, actor, reason):
        before = _state_snapshot(node)
        transition(node, self.to_state, actor=actor, action=self.name, reason=reason)
        if self.agent_action:
            request_agent_action(node=node, action=self.agent_action, actor=actor, reason=reason)
        record_audit(
            actor=actor,
            action=f"node.{self.name}",
            target=node,
            before=before,
            after=_state_snapshot(node),
            reason=reason,
        )
        return node


class StartBurnIn(TransitionAction):
    name, label, to_state, agent_action = "start_burn_in", "Start burn-in", L.BURN_IN, AgentAction.BURN_IN
    # a node on the ladder gets to burn-in by passing its last step, not by an operator skipping it
    only_from = frozenset({L.ENROLLED, L.REPAIR, L.RMA})


class StartBringUp(TransitionAction):
    """Climb the bring-up ladder (fleet.services.bring_up) from its first step; from
    `bring_up_failed` this is the retry once the layer that failed is fixed."""

    name, label, to_state = "start_bring_up", "Start bring-up", L.BRINGING_UP

    def execute(self, node, *, actor, reason):
        node = super().execute(node, actor=actor, reason=reason)
        start_ladder(node, timezone.now())
        return node


class Validate(TransitionAction):
    # Validation is the full DCGM level 3 run (the 60 min validating deadline is sized for it).
    name, label, to_state, agent_action = "validate", "Validate", L.VALIDATING, AgentAction.DCGM_R3


class Remediate(TransitionAction):
    name, label, to_state, agent_action = "remediate", "Remediate (GPU reset)", L.REMEDIATING, AgentAction.GPU_RESET


class Triage(TransitionAction):
    name, label, to_state = "triage", "Send to triage", L.TRIAGE


class Repair(TransitionAction):
    name, label, to_state = "repair", "Repair", L.REPAIR


class Rma(TransitionAction):
    name, label, to_state = "rma", "RMA", L.RMA
    consequence = "sends the node back to its vendor: it leaves the fleet until replaced hardware passes burn-in"


class Decommission(TransitionAction):
    name, label, to_state = "decommission", "Decommission", L.DECOMMISSIONING
    consequence = "takes the node out of service for good: next its drives are sanitised and it is retired"
    refuses_allocated = True
