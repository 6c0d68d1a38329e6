"""The node lifecycle: one transition table, enforced here and only here.

`transition()` is the only way a node's `lifecycle` changes. It validates the move against
`TRANSITIONS`, applies it with a compare-and-set UPDATE (so two writers cannot both move the
same node from the same state — the database settles it), sets or clears the state
deadline, and writes the node event. `InvalidTransition` carries what *is* allowed so APIs can
answer `409 invalid_transition` with the reason.
"""

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import router, transaction

from core import clock
from core.bulk import copy_values, update_returning
from core.context import current_request_id
from core.errors import Conflict
from core.ids import uuid7
from core.reference_data import burn_in_deadline
from core.services.agent_credentials import revoke_node_agent_tokens, rotate_node_identities
from fleet.choices import Lifecycle as L
from fleet.models import Node, NodeEvent

from .drive_gate import EXIT_OF_STATE, gate_status

# A node in these states has no agent any more: its tokens are revoked when it gets there.
GONE = frozenset({L.RETIRED, L.DISPOSED})
# Entering this state is a tenancy boundary: whoever had root on the node may have copied its
# agent token, so the node's identity is rotated in the same transaction as the move, before
# the wipe is visible to any agent (core.services.agent_credentials, docs/security.md).
ROTATES_IDENTITY = L.WIPING

# from-state → the states it may move to (docs/design, "Node"). Extra edges beyond the design
# table are marked with why they exist.
TRANSITIONS: dict[str, frozenset[str]] = {
    # intake
    # The bring-up ladder (fleet.services.bring_up) verifies each layer of the stack before
    # burn-in. enrolled → burn_in stays for nodes whose stack was verified outside Hangar.
    L.ENROLLED: frozenset({L.BRINGING_UP, L.BURN_IN, L.DECOMMISSIONING}),
    L.BRINGING_UP: frozenset({L.BURN_IN, L.BRING_UP_FAILED}),
    L.BRING_UP_FAILED: frozenset(
        {L.BRINGING_UP, L.TRIAGE, L.DECOMMISSIONING}
    ),  # operator retry once the layer is fixed
    L.BURN_IN: frozenset({L.AVAILABLE, L.BURN_IN_FAILED}),
    L.BURN_IN_FAILED: frozenset({L.TRIAGE}),
    # tenant use
    L.AVAILABLE: frozenset(
        {L.PROVISIONING, L.QUARANTINED, L.DECOMMISSIONING, L.VALIDATING}
    ),  # operator "validate": re-check a suspect idle node
    L.PROVISIONING: frozenset(
        {
            L.ACTIVE,
            L.PROVISION_FAILED,
            L.RELEASING,  # cancelled before it became active
            L.QUARANTINED,
        }
    ),
    L.PROVISION_FAILED: frozenset(
        {
            L.WIPING,  # clean up whatever was half-provisioned
            L.TRIAGE,
        }
    ),
    L.ACTIVE: frozenset({L.RELEASING, L.QUARANTINED}),
    L.RELEASING: frozenset({L.WIPING, L.WIPE_FAILED}),  # stop never confirmed → cannot be wiped safely
    L.WIPING: frozenset({L.AVAILABLE, L.WIPE_FAILED}),
    L.WIPE_FAILED: frozenset(
        {
            L.WIPING,  # operator retry
            L.TRIAGE,
        }
    ),
    # health
    L.QUARANTINED: frozenset({L.DRAINING, L.TRIAGE}),  # fatal signals skip remediation
    L.DRAINING: frozenset({L.REMEDIATING, L.TRIAGE}),
    L.REMEDIATING: frozenset({L.VALIDATING, L.TRIAGE}),
    L.VALIDATING: frozenset(
        {L.AVAILABLE, L.TRIAGE, L.WIPING}
    ),  # passed, but was pulled from a tenant unwiped: wipe first
    L.TRIAGE: frozenset(
        {L.REPAIR, L.RMA, L.DECOMMISSIONING, L.VALIDATING}
    ),  # diagnosis found nothing hardware: re-validate
    L.REPAIR: frozenset({L.BURN_IN}),
    L.RMA: frozenset({L.DECOMMISSIONING, L.BURN_IN}),  # replaced hardware comes back through burn-in
    # end of life
    L.DECOMMISSIONING: frozenset({L.SANITIZING}),
    L.SANITIZING: frozenset({L.RETIRED}),
    L.RETIRED: frozenset({L.DISPOSED}),
    L.DISPOSED: frozenset(),
}

# Working states that wait on the node agent, how long they may take, and where they go
# when the deadline passes (the reconciler enforces this).
BURN_IN_DEADLINE = burn_in_deadline()
STATE_TIMEOUTS: dict[str, timedelta] = {
    # facility.csv burn_in_deadline: the same value the migration planner schedules for burn-in.
    L.BURN_IN: BURN_IN_DEADLINE,
    L.PROVISIONING: timedelta(minutes=15),
    L.RELEASING: timedelta(minutes=10),
    L.WIPING: timedelta(minutes=30),
    L.DRAINING: timedelta(hours=2),  # how long a tenant gets to move off a draining node
    L.REMEDIATING: timedelta(minutes=30),
    L.VALIDATING: timedelta(minutes=60),  # reliability.csv: DCGM r3 ~15 min, plus NCCL and IB checks
    L.SANITIZING: timedelta(hours=24),
}
DEADLINE_FAILURE: dict[str, str] = {
    L.BURN_IN: L.BURN_IN_FAILED,
    L.PROVISIONING: L.PROVISION_FAILED,
    L.RELEASING: L.WIPE_FAILED,
    L.WIPING: L.WIPE_FAILED,
    L.DRAINING: L.REMEDIATING,  # the drain deadline passed: the node is pulled anyway
    L.REMEDIATING: L.TRIAGE,
    L.VALIDATING: L.TRIAGE,
    # sanitizing has no failure move: past its deadline it is flagged (last_error), never
    # retired, because retiring is gated on every drive's sanitisation record.
}

assert all(to in TRANSITIONS[src] for src, to in DEADLINE_FAILURE.items()), "deadline moves must be in the table"


class InvalidTransition(Conflict):
    """A move the table does not allow, or a node that moved under us."""

    code = "invalid_transition"

    def __init__(self, node: Node, to_state: str, detail: str | None = None):
        self.node = node
        self.from_state = node.lifecycle
        self.to_state = to_state
        self.allowed = sorted(TRANSITIONS.get(node.lifecycle, ()))
        self.detail = detail or (
            f"{node.hostname} is {node.lifecycle}; it cannot go to {to_state}. "
            f"From {node.lifecycle} it can go to: {', '.join(self.allowed) or 'nothing (terminal)'}."
        )
        super().__init__(self.detail, extra={"from_state": self.from_state, "allowed": self.allowed})


class ExitRefused(InvalidTransition):
    """A move out of custody (rma, retired, disposed) that the drive gate refuses. `status` is
    the gate's answer (fleet.services.drive_gate.GateStatus): what is missing, per drive."""

    code = "sanitization_incomplete"

    def __init__(self, node: Node, to_state: str, status):
        self.status = status
        missing = status.missing
        super().__init__(
            node,
            to_state,
            (
                f"{node.hostname} cannot go to {to_state}: the drive gate is not met ({len(missing)} open: "
                f"{status.refusal()}). Every drive the agent reported needs "
                f"a verified {', '.join(sorted({d.required for d in status.drives})) or 'sanitisation'} record with "
                "evidence first."
            ),
        )


@dataclass(frozen=True)
class Change:
    """A node's move, for callers that act after it (e.g. queueing agent work)."""

    node_id: object
    from_state: str
    to_state: str


def can_transition(from_state: str, to_state: str) -> bool:
    return to_state in TRANSITIONS.get(from_state, frozenset())


def _deadline_for(state: str, now):
    timeout = STATE_TIMEOUTS.get(state)
    return now + timeout if timeout else None


def state_entered_at(node: Node) -> datetime | None:
    """When the node entered its current timed state: agent results and check requests from
    before that belong to an earlier visit. `state_entered_at` is set by every move; a row put
    in its state without transition() (a raw update) falls back to its deadline minus the
    state's timeout, which holds until a control-plane outage moved the deadline."""
    if node.state_entered_at is not None:
        return node.state_entered_at
    timeout = STATE_TIMEOUTS.get(node.lifecycle)
    if node.state_deadline is None or timeout is None:
        return None
    return node.state_deadline - timeout


@transaction.atomic
def transition(
    node: Node,
    to_state: str,
    *,
    actor: str,
    action: str,
    reason: str = "",
    target_lifecycle: str = "",
    last_error: str | None = None,
) -> Node:
    """Move one node. Raises InvalidTransition if the table forbids it or the node has moved."""
    from_state = node.lifecycle
    if not can_transition(from_state, to_state):
        raise InvalidTransition(node, to_state)
    if to_state in EXIT_OF_STATE:
        status = gate_status([node.pk], EXIT_OF_STATE[to_state])[node.pk]
        if not status.passed:
            raise ExitRefused(node, to_state, status)
    now = clock.now()
    updates = {
        "lifecycle": to_state,
        "state_deadline": _deadline_for(to_state, now),
        "state_entered_at": now,
        "target_lifecycle": target_lifecycle,
        "updated_at": now,
    }
    if last_error is not None:
        updates["last_error"] = last_error
    if to_state != from_state:
        updates.update(failed_attempts=0, next_attempt_at=None)
    moved = Node.objects.filter(pk=node.pk, lifecycle=from_state).update(**updates)
    if not moved:
        current = Node.objects.filter(pk=node.pk).values_list("lifecycle", flat=True).first()
        raise InvalidTransition(node, to_state, f"{node.hostname} changed state concurrently (now {current}); retry.")
    for field, value in updates.items():
        setattr(node, field, value)
    NodeEvent.objects.create(
        node=node,
        at=now,
        actor=actor,
        action=action,
        from_state=from_state,
        to_state=to_state,
        reason=reason,
        request_id=current_request_id(),
    )
    if to_state in GONE:
        _revoke_tokens_on_commit([node], actor=actor, to_state=to_state)
    if to_state == ROTATES_IDENTITY:
        rotate_node_identities(node_ids=[node.pk], actor=actor, reason=f"{from_state} → {to_state}: {reason}")
    return node


def _revoke_tokens_on_commit(nodes: list[Node], *, actor: str, to_state: str) -> None:
    """After the move commits (the revocation list is in the other database). Robust: a ledger
    hiccup must not turn a committed retirement into an error; the control-plane agent routes
    refuse gone nodes anyway, and a gone node gets no new metering grants."""
    for node in nodes:
        transaction.on_commit(
            lambda node=node: revoke_node_agent_tokens(node=node, actor=actor, reason=f"node {to_state}"), robust=True
        )


EVENT_FIELDS = ("id", "node_id", "at", "actor", "action", "from_state", "to_state", "reason", "request_id")


# No savepoint: the batch is all-or-nothing inside its caller's transaction, and placement calls
# this on its hot path where each savepoint is two extra round trips.
@transaction.atomic(savepoint=False)
def transition_many(
    nodes: Iterable[Node], to_state: str, *, actor: str, action: str, reason: str = "", last_error: str | None = None
) -> list[Change]:
    """Move a batch of nodes (loops): one compare-and-set UPDATE … RETURNING per from-state and
    one INSERT of events.

    Nodes whose current state does not allow the move, or that moved concurrently, are left
    alone and not returned; the next level-triggered pass looks at them again.
    """
    now = clock.now()
    nodes = [n for n in nodes if can_transition(n.lifecycle, to_state)]
    if to_state in EXIT_OF_STATE and nodes:
        # Leaving custody: nodes the drive gate refuses stay where they are, with the reason.
        gate = gate_status([n.pk for n in nodes], EXIT_OF_STATE[to_state])
        held = [n for n in nodes if not gate[n.pk].passed]
        for node in held:
            node.last_error = f"{to_state} held by the drive gate: {'; '.join(gate[node.pk].missing[:3])}"[:2000]
        Node.objects.bulk_update(held, ["last_error"], batch_size=1000)
        nodes = [n for n in nodes if gate[n.pk].passed]
    by_state: dict[str, list[Node]] = {}
    for node in nodes:
        by_state.setdefault(node.lifecycle, []).append(node)
    changes: list[Change] = []
    events: list[tuple] = []  # EVENT_FIELDS of each move's node event
    request_id = current_request_id()
    moved_all: set = set()
    using = router.db_for_write(Node)
    for from_state, group in by_state.items():
        updates = {
            "lifecycle": to_state,
            "state_deadline": _deadline_for(to_state, now),
            "state_entered_at": now,
            "target_lifecycle": "",
            "failed_attempts": 0,
            "next_attempt_at": None,
            "updated_at": now,
        }
        if last_error is not None:
            updates["last_error"] = last_error
        # str(): COPY adapts by Python type, and a Lifecycle member must go as its value.
        event_values = (now, str(actor), str(action), str(from_state), str(to_state), str(reason), str(request_id))
        # Compare-and-set: only rows still in from_state move, and RETURNING says which did in
        # the same statement.
        moved = set(
            update_returning(
                Node, [n.pk for n in group], values=updates, expected={"lifecycle": from_state}, using=using
            )
        )
        moved_all |= moved
        for node in group:
            if node.pk in moved:
                changes.append(Change(node.pk, from_state, to_state))
                events.append((uuid7(), node.pk, *event_values))
                for field, value in updates.items():
                    setattr(node, field, value)
    # Plain values by COPY rather than NodeEvent instances through bulk_create: a reconcile batch
    # writes 500 events, and building the instances and bulk_create's parameterised INSERT (nine
    # columns × 500 values, each prepared and quoted) was a third of the pass's Python time at
    # 125,000 nodes (docs/design/lifecycle.md, Reconciler).
    copy_values(NodeEvent, EVENT_FIELDS, events, using=router.db_for_write(NodeEvent))
    if to_state in GONE:
        _revoke_tokens_on_commit(
            [n for group in by_state.values() for n in group if n.pk in moved_all], actor=actor, to_state=to_state
        )
    if to_state == ROTATES_IDENTITY and changes:
        rotate_node_identities(
            node_ids=[c.node_id for c in changes], actor=actor, reason=f"{action} → {to_state}: {reason}"
        )
    return changes


def record_node_event(node: Node, *, actor: str, action: str, reason: str = "") -> NodeEvent:
    """An action that changes no lifecycle (cordon, a flag, an agent result) still leaves a trace."""
    return NodeEvent.objects.create(
        node=node,
        at=clock.now(),
        actor=actor,
        action=action,
        from_state=node.lifecycle,
        to_state=node.lifecycle,
        reason=reason,
        request_id=current_request_id(),
    )
