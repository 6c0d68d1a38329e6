"""The node reconciler: keeps every node in a working state converging, from what agents report.

Level-triggered: each pass looks at where a node is and what its agent has reported since it
entered that state, never at events it might have missed. For each batch of claimed nodes it

- advances a node whose step's agent action succeeded (burn_in → available,
  provisioning → active, releasing → wiping, wiping → available);
- retries a failed step with exponential per-node backoff capped at 60 s, and moves the node
  to its failure state once the step has failed `MAX_ATTEMPTS` times;
- (re)queues the step's agent action when none is pending or finished (a node in `wiping`
  without a pending `wipe` gets one);
- moves a node past its state deadline to its failure state (`DEADLINE_FAILURE`) with
  `last_error` saying what did not happen in time;
- moves a `draining` node whose tenant has left on to `remediating`;
- flags a `sanitizing` node past its deadline (`last_error`); it is never moved on from here.

Deadlines count only time the reconciler was running: after a detected outage (its loop clock,
core.services.loop_clock) every running state deadline moves later by the gap.

Validating and remediating outcomes depend on health checks (the health app decides them);
only their deadlines are enforced here.

Each batch is one transaction that claims its rows with `SELECT ... FOR UPDATE SKIP LOCKED`
(PostgreSQL), so concurrent workers and operator actions never act on one node twice, and a
run that dies midway leaves every batch either done or untouched. Queries per batch are
constant: one claim (through the partial index fleet_node_working_idx, so it never walks idle
nodes), one read of agent actions, one of live allocations when the batch has draining nodes,
then one grouped write per kind of change (a move: one UPDATE and one COPY of its events).
"""

import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import connection, transaction
from django.db.models import DurationField, ExpressionWrapper, F, Q, Value
from django.db.models.functions import Coalesce, Greatest

from core import clock
from core.locks import locked_run
from core.models import LoopClock
from core.services.audit import record_audit
from core.services.loop_clock import Outage, note_run
from fleet.choices import AgentAction, AgentActionState
from fleet.choices import Lifecycle as L
from fleet.models import Node, NodeAgentAction
from fleet.selectors import occupied_node_ids

from .agent_work import request_agent_actions
from .lifecycle import DEADLINE_FAILURE, STATE_TIMEOUTS, state_entered_at, transition_many
from .wipe_exit import request_wipes, return_verdicts

ACTOR = "system:reconciler"
LOOP_NAME = "reconcile_nodes"
LOOP_INTERVAL = timedelta(seconds=10)  # core.periodic "reconcile nodes"
BATCH_SIZE = 500
TIME_BUDGET_S = 7.0  # the beat interval is 10 s: stop claiming new batches well before the next run
BACKOFF_BASE_S = 5
BACKOFF_CAP_S = 60

# Working state → (the agent action that completes it, where success leads, attempts before failing).
# A failed burn-in is a verdict on the hardware, not a transient: no retry.
STEPS: dict[str, tuple[str, str, int]] = {
    L.BURN_IN: (AgentAction.BURN_IN, L.AVAILABLE, 1),
    L.PROVISIONING: (AgentAction.PROVISION, L.ACTIVE, 3),
    L.RELEASING: (AgentAction.STOP, L.WIPING, 3),
    L.WIPING: (AgentAction.WIPE, L.AVAILABLE, 3),
}
FAILURE: dict[str, str] = {
    L.BURN_IN: L.BURN_IN_FAILED,
    L.PROVISIONING: L.PROVISION_FAILED,
    L.RELEASING: L.WIPE_FAILED,
    L.WIPING: L.WIPE_FAILED,
}
# Sanitizing has a deadline but no failure move (retiring is gated on sanitisation records):
# past it the node is only flagged with last_error.
WORKING_STATES = frozenset(STEPS) | frozenset(DEADLINE_FAILURE) | {L.SANITIZING}


def backoff(failures: int) -> timedelta:
    """5 s, 10 s, 20 s, 40 s, then 60 s: exponential per node, capped."""
    return timedelta(seconds=min(BACKOFF_BASE_S * 2 ** max(failures - 1, 0), BACKOFF_CAP_S))


def _minutes(delta: timedelta) -> str:
    minutes = int(delta.total_seconds() // 60)
    return f"{minutes // 60} h" if minutes >= 60 and minutes % 60 == 0 else f"{minutes} min"


def deadline_error(state: str) -> str:
    timeout = _minutes(STATE_TIMEOUTS[state])
    if state in STEPS:
        return f"{STEPS[state][0]} not confirmed by the agent within {timeout}"
    return f"{state} did not finish within {timeout}"


@dataclass
class PassResult:
    claimed: int = 0
    batches: int = 0
    moved: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    queued: int = 0
    retried: int = 0
    complete: bool = True  # False when the time budget stopped it before every node was seen
    skipped: bool = False  # another run held the lock
    rearmed: int = 0  # state deadlines moved later after a detected outage

    def as_dict(self) -> dict:
        return {
            "claimed": self.claimed,
            "batches": self.batches,
            "moved": dict(self.moved),
            "queued": self.queued,
            "retried": self.retried,
            "complete": self.complete,
            "skipped": self.skipped,
            "rearmed": self.rearmed,
        }


def _claim(after_id, now: datetime, batch_size: int) -> list[Node]:
    due = Q(next_attempt_at__isnull=True) | Q(next_attempt_at__lte=now) | Q(state_deadline__lte=now)
    qs = Node.objects.filter(due, lifecycle__in=WORKING_STATES).order_by("pk")
    if after_id is not None:
        qs = qs.filter(pk__gt=after_id)
    # Only what the batch reads (hostname for error messages): each datetime column loaded costs
    # a parse per row, and the ones a batch writes (attempts, backoff) it sets before writing.
    qs = qs.only("pk", "hostname", "lifecycle", "state_deadline", "state_entered_at", "last_error", "node_type_id")
    if connection.features.has_select_for_update_skip_locked:
        qs = qs.select_for_update(skip_locked=True, of=("self",))
    return list(qs[:batch_size])


def _reconcile_batch(nodes: list[Node], now: datetime, result: PassResult) -> None:
    ids = [n.pk for n in nodes]
    step_nodes = [n for n in nodes if n.lifecycle in STEPS]
    actions: dict = defaultdict(list)  # node id → its step's actions since it entered the state, oldest first
    if step_nodes:
        rows = (
            NodeAgentAction.objects.filter(
                node_id__in=[n.pk for n in step_nodes],
                drive__isnull=True,
                action__in={STEPS[n.lifecycle][0] for n in step_nodes},
            )
            .exclude(state=AgentActionState.CANCELLED)
            .order_by("created_at")
            .values_list("node_id", "action", "state", "created_at", "finished_at", "detail")
        )
        for row in rows:
            actions[row[0]].append(row)
    draining = [n.pk for n in nodes if n.lifecycle == L.DRAINING]
    occupied = occupied_node_ids(draining) if draining else set()

    advance: dict[str, list[Node]] = defaultdict(list)
    fail: dict[tuple[str, str], list[Node]] = defaultdict(list)  # (to_state, last_error) → nodes
    requeue: dict[str, list[Node]] = defaultdict(list)
    backing_off: list[Node] = []
    flagged: list[Node] = []
    waiting: list[Node] = []  # wiped, the new identity's inventory not in yet
    wiped: list[Node] = []
    wiped_at: dict = {}
    for node in nodes:
        state = node.lifecycle
        if state in STEPS:
            step, success, max_attempts = STEPS[state]
            entered = state_entered_at(node)
            # This visit's work: anything pending, and results requested or finished since the node
            # entered the state (work queued just before the move, e.g. by placement, counts too).
            mine = [
                a
                for a in actions[node.pk]
                if a[1] == step
                and (
                    entered is None
                    or a[2] == AgentActionState.PENDING
                    or a[3] >= entered
                    or (a[4] is not None and a[4] >= entered)
                )
            ]
            if any(a[2] == AgentActionState.SUCCEEDED for a in mine):
                if state == L.WIPING:
                    wiped.append(node)  # back to the pool only through the inventory check below
                    wiped_at[node.pk] = max(
                        (a[4] for a in mine if a[2] == AgentActionState.SUCCEEDED and a[4] is not None), default=None
                    )
                else:
                    advance[success].append(node)
                continue
            if node.state_deadline is not None and node.state_deadline <= now:
                fail[(DEADLINE_FAILURE[state], deadline_error(state))].append(node)
                continue
            if any(a[2] == AgentActionState.PENDING for a in mine):
                continue
            failures = [a for a in mine if a[2] == AgentActionState.FAILED]
            if len(failures) >= max_attempts:
                detail = failures[-1][5] or "no detail"
                fail[(FAILURE[state], f"{step} failed {len(failures)} times; last: {detail}")].append(node)
                continue
            if failures:
                retry_at = (failures[-1][4] or now) + backoff(len(failures))
                if retry_at > now:
                    node.failed_attempts, node.next_attempt_at = len(failures), retry_at
                    node.last_error = f"{step} failed: {failures[-1][5] or 'no detail'}; retry {len(failures) + 1} at {retry_at:%H:%M:%S}Z"
                    backing_off.append(node)
                    continue
                result.retried += 1
            requeue[step].append(node)
        elif state == L.SANITIZING:
            if node.state_deadline is not None and node.state_deadline <= now and not node.last_error:
                node.last_error = deadline_error(state) + "; check the drives' sanitisation records"
                flagged.append(node)
        elif node.state_deadline is not None and node.state_deadline <= now:
            fail[(DEADLINE_FAILURE[state], deadline_error(state))].append(node)
        elif state == L.DRAINING and node.pk not in occupied:
            advance[L.REMEDIATING].append(node)

    if wiped:
        verdicts = return_verdicts(wiped, wiped_at)
        for node in wiped:
            verdict = verdicts[node.pk]
            if verdict.outcome == "pass":
                advance[L.AVAILABLE].append(node)
            elif verdict.outcome == "fail":
                fail[(L.WIPE_FAILED, verdict.reason[:2000])].append(node)
            elif node.state_deadline is not None and node.state_deadline <= now:
                fail[
                    (L.WIPE_FAILED, f"{verdict.reason} (none came within {_minutes(STATE_TIMEOUTS[L.WIPING])})")
                ].append(node)
            elif node.last_error != verdict.reason:
                node.last_error = verdict.reason
                waiting.append(node)
    for to_state, group in advance.items():
        changes = transition_many(
            group,
            to_state,
            actor=ACTOR,
            action="reconcile",
            reason="the agent confirmed the step" if to_state != L.REMEDIATING else "the tenant has left the node",
        )
        result.moved[to_state] += len(changes)
        if to_state == L.WIPING and changes:  # start the next step now rather than on the next pass
            moved = {c.node_id for c in changes}
            result.queued += request_wipes(
                nodes=[n for n in group if n.pk in moved], actor=ACTOR, reason="tenant workload stopped"
            )
    for (to_state, error), group in fail.items():
        changes = transition_many(group, to_state, actor=ACTOR, action="reconcile", reason=error, last_error=error)
        result.moved[to_state] += len(changes)
        # The step is abandoned: an agent must not start it after the node was given up on.
        NodeAgentAction.objects.filter(
            node_id__in=[c.node_id for c in changes], state=AgentActionState.PENDING, drive__isnull=True
        ).update(state=AgentActionState.CANCELLED, finished_at=now, detail=f"cancelled: {error}")
    for step, group in requeue.items():
        why = "reconcile: no pending or finished action for this step"
        if step == AgentAction.WIPE:
            result.queued += request_wipes(nodes=group, actor=ACTOR, reason=why)
        else:
            result.queued += request_agent_actions(nodes=group, action=step, actor=ACTOR, reason=why)
    if waiting:
        Node.objects.bulk_update(waiting, ["last_error"])
    if backing_off:
        Node.objects.bulk_update(backing_off, ["failed_attempts", "next_attempt_at", "last_error"])
    if flagged:
        Node.objects.bulk_update(flagged, ["last_error"])
    result.claimed += len(ids)


def reconcile_pass(
    *, batch_size: int = BATCH_SIZE, time_budget_s: float = TIME_BUDGET_S, now: datetime | None = None, after_batch=None
) -> PassResult:
    """One pass over every node in a working state, batch by batch (each batch atomic).
    `after_batch(result)` is a hook for tests that kill a run midway."""
    started = time.monotonic()
    result = PassResult()
    last_id = None
    while True:
        if time.monotonic() - started > time_budget_s:
            result.complete = False
            break
        with transaction.atomic():
            batch_now = now or clock.now()
            nodes = _claim(last_id, batch_now, batch_size)
            if not nodes:
                break
            _reconcile_batch(nodes, batch_now, result)
        result.batches += 1
        last_id = nodes[-1].pk
        if after_batch is not None:
            after_batch(result)
        if len(nodes) < batch_size:
            break
    return result


def rearm_state_deadlines(outage: Outage) -> int:
    """Give back the time nobody could act in: every state deadline still running when the
    outage began moves later by the part of the outage the node spent in its state (the whole
    gap, or from its entry if it entered meanwhile, e.g. an operator's move). One UPDATE, one
    audit row. The entry time (`state_entered_at`) stays, so what the agents reported during the
    visit still counts."""
    started, ended = Value(outage.started), Value(outage.ended)
    entered = Coalesce(F("state_entered_at"), started)
    in_state = ExpressionWrapper(ended - Greatest(started, entered), output_field=DurationField())
    moved = Node.objects.filter(
        lifecycle__in=list(STATE_TIMEOUTS), state_deadline__isnull=False, state_deadline__gt=outage.started
    ).update(state_deadline=F("state_deadline") + in_state)
    gap = int(outage.length.total_seconds())
    if moved:
        record_audit(
            actor=ACTOR,
            action="node.state_deadlines_rearmed",
            target=LoopClock.objects.get(name=LOOP_NAME),
            after={"nodes": moved, "gap_seconds": gap},
            reason=f"the reconciler was away {gap} s (from {outage.started:%H:%M:%S} UTC); "
            "node state deadlines moved by the time each node spent in its state meanwhile",
        )
    return moved


def reconcile_nodes(**kwargs) -> PassResult:
    """The loop's entry point (Celery beat, `run_loops`): one pass under the advisory lock, so
    two scheduled runs never overlap; rows are still claimed with SKIP LOCKED because operator
    actions and the other loops write nodes too. A pass that finds the previous one minutes old
    (database, broker, beat or worker away) first re-arms the state deadlines."""
    with locked_run(LOOP_NAME) as acquired:
        if not acquired:
            return PassResult(skipped=True, complete=False)
        outage = note_run(LOOP_NAME, now=kwargs.get("now") or clock.now(), interval=LOOP_INTERVAL)
        rearmed = rearm_state_deadlines(outage) if outage is not None else 0
        result = reconcile_pass(**kwargs)
        result.rearmed = rearmed
        return result
