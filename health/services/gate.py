"""The validation gate: the checks a node must pass to leave `validating` (or `burn_in`).

After a GPU reset: DCGM r2 + NCCL all-reduce + IB link. After a power cycle or repair:
DCGM r3 + NCCL + IB link. Burn-in at intake: DCGM r3 + NCCL + burn-in. Server time decides:
only results the server RECEIVED after it requested the checks count (never the agent's own
timestamp, which a skewed or forged clock could put anywhere), and results refused at ingest
(clock_skew) never count. Any failure → triage (burn-in → burn_in_failed).
A node pulled from a tenant goes on to `wiping` instead of `available`, so the previous
tenant's data is gone before it is placed again.
Flapping: a node that already failed validation twice in 7 days, or burn-in at all since its
intake (enrolment or return from RMA), is not accepted on the next pass: validation → triage,
burn-in → burn_in_failed, where an operator decides with the failures on the node's trail. The count restarts after that decision. A third
triage within 30 days → RMA (through the drive gate).
"""

from datetime import datetime

from django.db.models import Count, Q

from fleet.choices import AgentAction, AgentActionState, Lifecycle
from fleet.models import Node, NodeAgentAction, NodeEvent
from fleet.services.lifecycle import state_entered_at, transition_many
from fleet.services.wipe_exit import request_wipes
from health.choices import CheckStatus, IncidentState, IncidentStep
from health.models import HealthCheckResult
from health.policy import (
    BURN_IN_FAILURES_BEFORE_HOLD,
    FLAP_FAILURES,
    FLAP_WINDOW,
    GATE_AFTER_REBOOT,
    GATE_AFTER_RESET,
    GATE_BURN_IN,
    RMA_TRIAGES,
    RMA_WINDOW,
)
from health.services.conditions import clear_node_conditions
from health.services.incidents import record_step, settle_credits
from tenants.models import AllocationNode


def required_checks(lifecycle: str, remediation: str | None) -> tuple[str, ...]:
    if lifecycle == Lifecycle.BURN_IN:
        return GATE_BURN_IN
    return GATE_AFTER_RESET if remediation == AgentAction.GPU_RESET else GATE_AFTER_REBOOT


def last_remediation(node_ids) -> dict:
    """{node_id: gpu_reset | reboot} for nodes that came to validating straight from remediation
    (two queries). Anything else (repair, an operator's re-validation) gets the long checks."""
    came_from = dict(
        NodeEvent.objects.filter(node_id__in=node_ids, to_state=Lifecycle.VALIDATING)
        .order_by("at")
        .values_list("node_id", "from_state")
    )
    remediated = [n for n, state in came_from.items() if state == Lifecycle.REMEDIATING]
    rows = (
        NodeAgentAction.objects.filter(
            node_id__in=remediated,
            state=AgentActionState.SUCCEEDED,
            action__in=(AgentAction.GPU_RESET, AgentAction.REBOOT),
        )
        .order_by("created_at")
        .values_list("node_id", "action")
    )
    return dict(rows)


def apply_gate(*, now: datetime, actor: str) -> dict:
    nodes = list(
        Node.objects.filter(lifecycle__in=(Lifecycle.VALIDATING, Lifecycle.BURN_IN))
        .select_for_update(skip_locked=True)
        .only("id", "hostname", "lifecycle", "state_deadline", "state_entered_at")
    )
    if not nodes:
        return {"passed": 0, "failed": 0, "flapping": 0, "rma": 0}
    ids = [n.pk for n in nodes]
    remediation = last_remediation(ids)
    requested = _checks_requested(nodes)
    results: dict = {}
    for node_id, name, status, received_at in (
        HealthCheckResult.objects.filter(node_id__in=ids, refused="")
        .order_by("received_at")
        .values_list("node_id", "name", "status", "received_at")
    ):
        results.setdefault(node_id, []).append((name, status, received_at))
    passed, failed = [], []
    for node in nodes:
        since = requested.get(node.pk) or state_entered_at(node)
        need = required_checks(node.lifecycle, remediation.get(node.pk))
        latest = {name: status for name, status, at in results.get(node.pk, []) if since is None or at >= since}
        if any(latest.get(name) == CheckStatus.FAIL for name in need):
            failed.append(node)
        elif all(latest.get(name) in (CheckStatus.PASS, CheckStatus.WARN) for name in need):
            passed.append(node)
    flapping = _flapping({n.pk: n.lifecycle for n in passed}, now)
    accepted = [n for n in passed if n.pk not in flapping]
    to_triage = [n for n in failed if n.lifecycle == Lifecycle.VALIDATING] + [
        n for n in passed if n.pk in flapping and n.lifecycle == Lifecycle.VALIDATING
    ]
    burn_failed = [n for n in failed if n.lifecycle == Lifecycle.BURN_IN]
    burn_flapping = [n for n in passed if n.pk in flapping and n.lifecycle == Lifecycle.BURN_IN]

    # A node pulled from a tenant still holds the tenant's data: it is wiped before it is placed again.
    unwiped = set(
        AllocationNode.objects.filter(
            node_id__in=[n.pk for n in accepted], ended_at__isnull=False, wiped_at__isnull=True
        ).values_list("node_id", flat=True)
    )
    returned = transition_many(
        [n for n in accepted if n.pk not in unwiped],
        Lifecycle.AVAILABLE,
        actor=actor,
        action="health_validated",
        reason="passed the validation gate",
        last_error="",
    )
    to_wipe = transition_many(
        [n for n in accepted if n.pk in unwiped],
        Lifecycle.WIPING,
        actor=actor,
        action="health_validated",
        reason="passed the validation gate; wiping the previous tenant's data before reuse",
        last_error="",
    )
    request_wipes(
        nodes=[n for n in accepted if n.pk in {c.node_id for c in to_wipe}],
        actor=actor,
        reason="wipe before reuse after a health pull",
    )
    returned_ids = [c.node_id for c in returned + to_wipe]
    if returned_ids:
        Node.objects.filter(pk__in=returned_ids).update(cordoned=False, cordon_reason="", attribution="")
        clear_node_conditions(node_ids=returned_ids, now=now)
        record_step(
            node_ids=returned_ids,
            step=IncidentStep.RETURN,
            actor=actor,
            now=now,
            detail="passed the validation gate; back in service",
            state=IncidentState.REPAIRED,
        )
        settle_credits(node_ids=returned_ids, end=now, actor=actor)
    transition_many(
        burn_failed,
        Lifecycle.BURN_IN_FAILED,
        actor=actor,
        action="health_burn_in_failed",
        reason="failed a burn-in check",
    )
    # A burn-in that passes after failing since the node's intake is not accepted unattended:
    # the node waits in burn_in_failed for an operator, the failed checks named on its trail.
    failed_checks = _failed_burn_in_checks([n.pk for n in burn_flapping])
    for node in burn_flapping:
        transition_many(
            [node],
            Lifecycle.BURN_IN_FAILED,
            actor=actor,
            action=FLAP_ACTION,
            reason=f"passed burn-in after failing it {flapping[node.pk]} times since intake "
            f"(failed: {failed_checks.get(node.pk, 'see the runs')}): "
            "an operator decides (triage → repair, RMA or validate)",
            last_error="burn-in failed since intake: operator decision required",
        )
    triaged = _triage(to_triage, flapping=flapping, now=now, actor=actor)
    return {"passed": len(returned_ids), "failed": len(failed), "flapping": len(flapping), "rma": triaged}


CHECK_ACTIONS = (AgentAction.DCGM_R2, AgentAction.DCGM_R3, AgentAction.BURN_IN)


def _checks_requested(nodes: list[Node]) -> dict:
    """{node_id: when the server asked for this state's checks} (one query): the first check
    request at or after the node entered its state, by the server's clock."""
    entered = {n.pk: state_entered_at(n) for n in nodes}
    first: dict = {}
    for node_id, created in (
        NodeAgentAction.objects.filter(node_id__in=list(entered), action__in=CHECK_ACTIONS)
        .order_by("created_at")
        .values_list("node_id", "created_at")
    ):
        since = entered[node_id]
        if node_id not in first and (since is None or created >= since):
            first[node_id] = created
    return first


FLAP_ACTION = "health_flapping"
# A failed run of each gated state, as the trail records it.
FAILED_RUN = {
    Lifecycle.VALIDATING: (Lifecycle.VALIDATING, Lifecycle.TRIAGE),
    Lifecycle.BURN_IN: (Lifecycle.BURN_IN, Lifecycle.BURN_IN_FAILED),
}


def _flapping(lifecycle_by_node: dict, now: datetime) -> dict:
    """{node_id: failures} for passing nodes that may not be accepted unattended: validation
    failed FLAP_FAILURES times in FLAP_WINDOW; burn-in failed even once since the node's intake
    (enrolment, or its return from RMA). Either count restarts after an operator decided on a
    hold (the FLAP_ACTION event)."""
    if not lifecycle_by_node:
        return {}
    ids = list(lifecycle_by_node)
    validating = {n for n, state in lifecycle_by_node.items() if state == Lifecycle.VALIDATING}
    since = {n: (now - FLAP_WINDOW if n in validating else None) for n in ids}

    def later(node_id, at):
        since[node_id] = at if since[node_id] is None else max(since[node_id], at)

    for node_id, at in NodeEvent.objects.filter(node_id__in=ids, action=FLAP_ACTION).values_list("node_id", "at"):
        later(node_id, at)
    intake = NodeEvent.objects.filter(node_id__in=ids).filter(
        Q(to_state=Lifecycle.ENROLLED) | Q(from_state=Lifecycle.RMA)
    )
    for node_id, at in intake.values_list("node_id", "at"):
        if node_id not in validating:
            later(node_id, at)
    failures: dict = {}
    for node_id, from_state, to_state, at in (
        NodeEvent.objects.filter(node_id__in=ids, from_state__in=list(FAILED_RUN))
        .exclude(action=FLAP_ACTION)
        .values_list("node_id", "from_state", "to_state", "at")
    ):
        if (from_state, to_state) == FAILED_RUN.get(lifecycle_by_node[node_id]) and (
            since[node_id] is None or at > since[node_id]
        ):
            failures[node_id] = failures.get(node_id, 0) + 1
    return {
        n: c for n, c in failures.items() if c >= (FLAP_FAILURES if n in validating else BURN_IN_FAILURES_BEFORE_HOLD)
    }


def _failed_burn_in_checks(node_ids) -> dict:
    """{node_id: 'check date (detail), …'}: the failed checks since the node's intake (or the
    last hold an operator decided on), which the operator decides on."""
    since: dict = {}
    marks = NodeEvent.objects.filter(node_id__in=list(node_ids)).filter(
        Q(to_state=Lifecycle.ENROLLED) | Q(from_state=Lifecycle.RMA) | Q(action=FLAP_ACTION)
    )
    for node_id, at in marks.values_list("node_id", "at"):
        since[node_id] = max(at, since.get(node_id, at))
    names: dict = {}
    for node_id, name, detail, at in (
        HealthCheckResult.objects.filter(node_id__in=list(node_ids), status=CheckStatus.FAIL, refused="")
        .order_by("received_at")
        .values_list("node_id", "name", "detail", "received_at")
    ):
        if since.get(node_id) is None or at >= since[node_id]:
            names.setdefault(node_id, []).append(f"{name} {at:%Y-%m-%d}" + (f" ({detail[:60]})" if detail else ""))
    return {n: ", ".join(v[-5:]) for n, v in names.items()}


def _triage(nodes: list[Node], *, flapping: set, now: datetime, actor: str) -> int:
    """Move failed or flapping nodes to triage; a third triage in 30 days goes on to RMA."""
    if not nodes:
        return 0
    flappers = [n for n in nodes if n.pk in flapping]
    failures = [n for n in nodes if n.pk not in flapping]
    transition_many(
        failures,
        Lifecycle.TRIAGE,
        actor=actor,
        action="health_validation_failed",
        reason="failed a validation check",
        last_error="failed the validation gate",
    )
    transition_many(
        flappers,
        Lifecycle.TRIAGE,
        actor=actor,
        action=FLAP_ACTION,
        reason=f"failed validation {FLAP_FAILURES} times in {FLAP_WINDOW.days} days; not accepted again",
        last_error="flapping: not accepted on a third validation pass",
    )
    ids = [n.pk for n in nodes]
    record_step(
        node_ids=ids,
        step=IncidentStep.DIAGNOSE,
        actor=actor,
        now=now,
        state=IncidentState.DIAGNOSED,
        detail="validation gate failed (or node flapping): sent to triage",
    )
    return send_repeat_triage_to_rma(node_ids=ids, now=now, actor=actor)


def send_repeat_triage_to_rma(*, node_ids, now: datetime, actor: str) -> int:
    repeat = {
        r["node_id"]
        for r in NodeEvent.objects.filter(
            node_id__in=list(node_ids), to_state=Lifecycle.TRIAGE, at__gte=now - RMA_WINDOW
        )
        .exclude(from_state=Lifecycle.TRIAGE)
        .values("node_id")
        .annotate(n=Count("id"))
        .filter(n__gte=RMA_TRIAGES)
    }
    if not repeat:
        return 0
    nodes = list(Node.objects.filter(pk__in=repeat, lifecycle=Lifecycle.TRIAGE))
    changes = transition_many(
        nodes,
        Lifecycle.RMA,
        actor=actor,
        action="health_rma",
        reason=f"{RMA_TRIAGES} triages in {RMA_WINDOW.days} days",
    )
    record_step(
        node_ids=[c.node_id for c in changes],
        step=IncidentStep.DIAGNOSE,
        actor=actor,
        now=now,
        detail="sent for RMA (repeated triage)",
        state=IncidentState.DIAGNOSED,
    )
    return len(changes)
