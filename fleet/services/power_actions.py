"""Power actions through a node's BMC: asked (recorded, audited), sent (one Redfish reset),
then confirmed when the power sync loop sees the state the action leads to, or failed at its
deadline. Power is its own dimension next to the lifecycle: an action changes the node's
desired power, never its lifecycle; the health loop reads the outcome of the power cycles it
asks for (health.services.sweep).

Idempotent: one open (pending or accepted) action per node, enforced by the database; asking
the same action again returns the open one, asking a different one while it runs is a 409.
"""

from dataclasses import dataclass
from datetime import timedelta

from django.db import IntegrityError, transaction
from django.utils import timezone

from core.errors import Conflict, Invalid
from core.services.audit import AuditEntry, record_audit, record_audits
from core.services.permissions import require_permission
from fleet.choices import POWER_ACTION_RESULT, Lifecycle, PowerAction, PowerActionState
from fleet.models import BMCPowerAction, Node, NodeBMC, NodeEvent
from fleet.selectors import occupied_node_ids

from . import bmc as redfish
from .bmc_credentials import CredentialsUnreadable, target_for
from .lifecycle import record_node_event

OPEN_STATES = (PowerActionState.PENDING, PowerActionState.ACCEPTED)
# How long the resulting state may take to show. A server's POST (memory training on a
# 2 TB GPU host) takes minutes; a graceful shutdown waits for the OS. Hangar's own choice.
DEADLINES: dict[str, timedelta] = {
    PowerAction.POWER_ON: timedelta(minutes=10),
    PowerAction.POWER_OFF: timedelta(minutes=10),
    PowerAction.FORCE_OFF: timedelta(minutes=2),
    PowerAction.GRACEFUL_RESTART: timedelta(minutes=15),
    PowerAction.FORCE_RESTART: timedelta(minutes=10),
    PowerAction.POWER_CYCLE: timedelta(minutes=10),
}
# What takes a tenant's workload down with it: refused while a live allocation is on the node.
DISRUPTIVE = frozenset(PowerAction.values) - {PowerAction.POWER_ON}
NOT_POWERED = frozenset({Lifecycle.DISPOSED})


class PowerActionRefused(Conflict):
    def __init__(self, code: str, detail: str, extra: dict | None = None):
        super().__init__(detail, code=code, extra=extra)


def describe(action: str) -> str:
    return PowerAction(action).label.lower()


def _bmc_or_refuse(node: Node) -> NodeBMC:
    bmc = NodeBMC.objects.filter(node=node).first()
    if bmc is None or not bmc.has_credentials:
        raise PowerActionRefused(
            "no_bmc",
            f"{node.hostname} has no BMC record with credentials, so Hangar cannot reach it out of band. "
            "Add its Redfish address and credentials (node page, admin, or PUT /api/v1/ops/nodes/{id}/bmc) first.",
        )
    return bmc


@transaction.atomic
def request_power_action(
    *, node: Node, action: str, actor: str, reason: str = "", user=None, allow_in_use: bool = False
) -> BMCPowerAction:
    """Record the ask. Raises Invalid (unknown action), PermissionMissing, or PowerActionRefused
    (`no_bmc`, `node_in_use`, `power_action_in_progress`, `node_gone`)."""
    if action not in PowerAction.values:
        raise Invalid(
            f"Unknown power action {action!r}.",
            extra={"errors": [{"field": "action", "message": f"one of {', '.join(PowerAction.values)}"}]},
        )
    if user is not None:
        require_permission(user, "node.power")
    node = Node.objects.select_for_update().get(pk=node.pk)
    if node.lifecycle in NOT_POWERED:
        raise PowerActionRefused("node_gone", f"{node.hostname} is {node.lifecycle}; it has left the fleet.")
    bmc = _bmc_or_refuse(node)
    open_action = BMCPowerAction.objects.filter(node=node, state__in=OPEN_STATES).first()
    if open_action is not None:
        if open_action.action == action:
            return open_action  # asked twice: the same work
        raise PowerActionRefused(
            "power_action_in_progress",
            f"{node.hostname} is already being asked to {describe(open_action.action)} (since "
            f"{open_action.created_at:%H:%M:%S} UTC, deadline {open_action.deadline:%H:%M:%S}); wait for it to "
            "finish or fail, then retry.",
            extra={"power_action_id": str(open_action.pk)},
        )
    if action in DISRUPTIVE and not allow_in_use and occupied_node_ids([node.pk]):
        raise PowerActionRefused(
            "node_in_use",
            f"{node.hostname} carries a live tenant allocation; {describe(action)} would take the tenant's workload "
            "down. Drain the node first (node actions), then retry.",
        )
    now = timezone.now()
    try:
        with transaction.atomic():
            power_action = BMCPowerAction.objects.create(
                node=node, action=action, requested_by=actor, reason=reason, deadline=now + DEADLINES[action]
            )
    except IntegrityError:  # a concurrent ask won the one open slot
        return BMCPowerAction.objects.get(node=node, state__in=OPEN_STATES)
    before = bmc.desired_power
    bmc.desired_power, bmc.drift_since = POWER_ACTION_RESULT[action], None
    bmc.save(update_fields=["desired_power", "drift_since", "updated_at"])
    record_node_event(node, actor=actor, action=f"power_{action}", reason=reason or f"{describe(action)} requested")
    record_audit(
        actor=actor,
        action="node.power",
        target=node,
        before={"desired_power": before, "power_state": node.power_state},
        after={"desired_power": bmc.desired_power, "power_action": action, "power_action_id": str(power_action.pk)},
        reason=reason,
    )
    return power_action


@dataclass(frozen=True)
class SendResult:
    action_id: object
    ok: bool
    reset_type: str = ""
    response: str = ""
    error_kind: str = ""
    error: str = ""


def claim_pending(action_ids=None, *, limit: int = 1000) -> list[BMCPowerAction]:
    """Mark pending, unsent actions as being sent, so only one process sends each (SKIP LOCKED
    on PostgreSQL: a second sender passes over the rows the first holds)."""
    with transaction.atomic():
        qs = BMCPowerAction.objects.filter(state=PowerActionState.PENDING, sent_at__isnull=True)
        if action_ids is not None:
            qs = qs.filter(pk__in=list(action_ids))
        rows = list(qs.select_for_update(skip_locked=True).order_by("created_at")[:limit])
        now = timezone.now()
        BMCPowerAction.objects.filter(pk__in=[r.pk for r in rows]).update(sent_at=now)
        for row in rows:
            row.sent_at = now
    return rows


def send_one(action: BMCPowerAction, target) -> SendResult:
    """The Redfish call for one claimed action (no database: safe in a thread)."""
    try:
        answer = redfish.power_action(target, action.action)
    except redfish.BMCError as exc:
        return SendResult(action.pk, False, error_kind=exc.kind, error=exc.detail)
    return SendResult(action.pk, True, reset_type=answer.reset_type, response=answer.response)


def targets_for(actions: list[BMCPowerAction]) -> tuple[dict, list[SendResult]]:
    """{action id: Target}, and failures for actions whose credentials cannot be opened."""
    bmcs = {b.node_id: b for b in NodeBMC.objects.filter(node_id__in=[a.node_id for a in actions])}
    targets, failures = {}, []
    for action in actions:
        try:
            targets[action.pk] = target_for(bmcs[action.node_id])
        except (CredentialsUnreadable, KeyError) as exc:
            failures.append(SendResult(action.pk, False, error_kind="bad_credentials", error=str(exc)))
    return targets, failures


@transaction.atomic
def record_send_results(results: list[SendResult], *, actor: str) -> None:
    """The BMC's answers: accepted actions wait for the sync loop's observation; refused ones
    fail now, with the reason on the node."""
    if not results:
        return
    now = timezone.now()
    actions = {a.pk: a for a in BMCPowerAction.objects.filter(pk__in=[r.action_id for r in results])}
    nodes = {n.pk: n for n in Node.objects.filter(pk__in=[a.node_id for a in actions.values()])}
    events = []
    for result in results:
        action = actions[result.action_id]
        node = nodes[action.node_id]
        if result.ok:
            BMCPowerAction.objects.filter(pk=action.pk, state=PowerActionState.PENDING).update(
                state=PowerActionState.ACCEPTED, reset_type=result.reset_type, bmc_response=result.response
            )
            NodeBMC.objects.filter(node_id=node.pk).update(
                reachable=True, last_ok_at=now, last_error="", last_error_kind=""
            )
            text = f"{describe(action.action)}: {result.response}; waiting to see the node {POWER_ACTION_RESULT[action.action]}"
        else:
            BMCPowerAction.objects.filter(pk=action.pk, state=PowerActionState.PENDING).update(
                state=PowerActionState.FAILED, finished_at=now, bmc_response=result.error, detail=result.error
            )
            NodeBMC.objects.filter(node_id=node.pk).update(
                reachable=result.error_kind != "unreachable",
                last_error=result.error,
                last_error_kind=result.error_kind,
                last_error_at=now,
                desired_power="",  # the ask failed: no opinion until someone asks again
            )
            Node.objects.filter(pk=node.pk).update(
                last_error=f"BMC {describe(action.action)} failed: {result.error}"[:2000]
            )
            text = f"{describe(action.action)} failed: {result.error}"
        events.append(_event(node, actor=actor, action=f"power_{action.action}_sent", reason=text, at=now))
    NodeEvent.objects.bulk_create(events)


def _event(node: Node, *, actor: str, action: str, reason: str, at) -> NodeEvent:
    return NodeEvent(
        node=node, at=at, actor=actor, action=action, from_state=node.lifecycle, to_state=node.lifecycle, reason=reason
    )


def send_power_actions(action_ids=None, *, actor: str = "system:bmc") -> list[SendResult]:
    """Claim and send pending actions one after another (the loop sends many in threads)."""
    claimed = claim_pending(action_ids)
    targets, results = targets_for(claimed)
    results += [send_one(a, targets[a.pk]) for a in claimed if a.pk in targets]
    record_send_results(results, actor=actor)
    return results


def perform_power_action(*, node: Node, action: str, actor: str, reason: str = "", user=None) -> BMCPowerAction:
    """What the console, admin and API call: record the ask, then send it right away (after the
    ask has committed, so the BMC is never called inside a transaction: callers do not wrap it)."""
    power_action = request_power_action(node=node, action=action, actor=actor, reason=reason, user=user)
    if power_action.state == PowerActionState.PENDING and power_action.sent_at is None:
        send_power_actions([power_action.pk], actor=actor)
        power_action.refresh_from_db()
    return power_action


def observed_done(action: BMCPowerAction, observed: str) -> bool:
    """An accepted action is done when the BMC reports the state it leads to."""
    return action.state == PowerActionState.ACCEPTED and observed == POWER_ACTION_RESULT[action.action]


def nodes_with_bmc(node_ids) -> set:
    """Which of these nodes Hangar can reach out of band (a BMC record with credentials)."""
    return set(
        NodeBMC.objects.filter(node_id__in=list(node_ids))
        .exclude(username_encrypted="")
        .exclude(credentials_origin="")
        .values_list("node_id", flat=True)
    )


@transaction.atomic(savepoint=False)  # all-or-nothing in the caller's transaction (the health sweep)
def request_power_actions(*, nodes: list[Node], action: str, actor: str, reason: str) -> list[BMCPowerAction]:
    """Batch form for loops: one open action per node (nodes with one already keep it). The
    caller has drained the nodes; sending is the power sync's (or a task queued on commit)."""
    nodes = list(nodes)
    busy = set(BMCPowerAction.objects.filter(node__in=nodes, state__in=OPEN_STATES).values_list("node_id", flat=True))
    now = timezone.now()
    rows = [
        BMCPowerAction(node=n, action=action, requested_by=actor, reason=reason, deadline=now + DEADLINES[action])
        for n in nodes
        if n.pk not in busy
    ]
    BMCPowerAction.objects.bulk_create(rows, ignore_conflicts=True)
    NodeBMC.objects.filter(node_id__in=[r.node_id for r in rows]).update(
        desired_power=POWER_ACTION_RESULT[action], drift_since=None
    )
    NodeEvent.objects.bulk_create(
        [_event(n, actor=actor, action=f"power_{action}", reason=reason, at=now) for n in nodes if n.pk not in busy]
    )
    record_audits(
        actor=actor,
        entries=[
            AuditEntry(action="node.power", target=n, after={"power_action": action}, reason=reason)
            for n in nodes
            if n.pk not in busy
        ],
    )
    return rows
