"""The allocation loop: level-triggered, batched, under the `allocation_loop` advisory lock.

Each pass:
0. outage: when the previous pass is minutes old (broker, beat, worker or database away), every
   pending and provisioning deadline moves by the gap: nobody could place or provision in it;
1. cancel intents: pending → cancelled; provisioning/active → nodes releasing + `stop`, allocation releasing;
2. places pending allocations, oldest first (before any deadline is judged: an allocation that
   fits now is placed, never failed for "insufficient capacity" while nodes are free);
3. deadlines: pending past 10 min → failed (insufficient capacity); provisioning past its deadline → failed,
   its nodes released;
4. provisioning → active when every node is `active`; degraded cleared when replacements are active;
   missing replacements retried;
5. operator drains of nodes in use: the tenant moves to a replacement node, the drained node is
   stopped (then wiped by the reconciler) and stays cordoned;
6. releasing/failed: a membership ends once its node has left the in-use states (the agents confirmed
   stop and wipe and the reconciler moved it on); the allocation ends when none is left.

Nodes never move further than the agents confirmed: this loop only asks (provision, stop) and
moves nodes into `provisioning` and `releasing`.
"""

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import timedelta

from django.db import connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from core.locks import locked_run
from core.models import LoopClock
from core.services.audit import record_audit
from core.services.loop_clock import note_run
from fleet.choices import AgentAction, Lifecycle
from fleet.models import Node, NodeEvent
from fleet.selectors import nodes_to_drain
from fleet.services.agent_work import request_agent_actions
from fleet.services.lifecycle import transition_many
from tenants.choices import AllocationNodeRole
from tenants.choices import AllocationState as S
from tenants.models import Allocation, AllocationNode
from tenants.notifications import emit_tenant_event
from tenants.services.access import cancel_access_syncs, record_confirmations
from tenants.services.allocations import allocation_event_data, transition_allocation
from tenants.services.placement import (
    InsufficientCapacity,
    claim_nodes,
    place_allocation,
)

ACTOR = "system:allocation-loop"
BATCH = 200
LOOP_INTERVAL = timedelta(seconds=10)  # core.periodic "allocation loop"
# Node states in which a node still belongs to its allocation.
HELD_STATES = (Lifecycle.PROVISIONING, Lifecycle.ACTIVE, Lifecycle.RELEASING, Lifecycle.WIPING)
# Node states the loop stops (the agent runs the tenant's workload or is setting it up).
STOPPABLE_STATES = (Lifecycle.PROVISIONING, Lifecycle.ACTIVE)


@dataclass
class LoopResult:
    skipped: bool = False
    counts: dict = field(default_factory=lambda: defaultdict(int))

    def __str__(self) -> str:
        if self.skipped:
            return "skipped (another run holds the lock)"
        return ", ".join(f"{k} {v}" for k, v in sorted(self.counts.items())) or "nothing to do"


def _claim(qs):
    qs = qs.order_by("created_at", "id")
    if connection.vendor == "postgresql":
        qs = qs.select_for_update(skip_locked=True, of=("self",))
    return list(qs[:BATCH])


def _live_members(allocation_ids) -> dict:
    rows = AllocationNode.objects.filter(allocation_id__in=allocation_ids, ended_at__isnull=True).select_related("node")
    out: dict = defaultdict(list)
    for m in rows:
        out[m.allocation_id].append(m)
    return out


def _release_nodes(allocation: Allocation, members: list[AllocationNode], reason: str) -> None:
    cancel_access_syncs([m.node_id for m in members], reason)
    nodes = [m.node for m in members if m.node.lifecycle in STOPPABLE_STATES]
    if nodes:
        transition_many(nodes, Lifecycle.RELEASING, actor=ACTOR, action="release", reason=reason)
        request_agent_actions(
            nodes=nodes,
            action=AgentAction.STOP,
            actor=ACTOR,
            params={"allocation_id": str(allocation.pk)},
            reason=reason,
        )


def _serve_cancels(result: LoopResult) -> None:
    wanted = _claim(
        Allocation.objects.filter(cancel_requested_at__isnull=False, state__in=(S.PENDING, S.PROVISIONING, S.ACTIVE))
    )
    members = _live_members([a.pk for a in wanted])
    for allocation in wanted:
        if allocation.state == S.PENDING:
            transition_allocation(allocation, S.CANCELLED, actor=ACTOR, reason="cancelled before placement")
        else:
            _release_nodes(allocation, members[allocation.pk], "tenant cancelled the allocation")
            transition_allocation(allocation, S.RELEASING, actor=ACTOR, reason="tenant cancelled the allocation")
        result.counts["cancelled"] += 1


def _rearm_deadlines(result: LoopResult, outage) -> None:
    """Give back the time the loop was away: pending and provisioning deadlines that were still
    running when the outage began move later by its length (one UPDATE)."""
    moved = Allocation.objects.filter(state__in=(S.PENDING, S.PROVISIONING), state_deadline__gt=outage.started).update(
        state_deadline=F("state_deadline") + outage.length
    )
    if moved:
        record_audit(
            actor=ACTOR,
            action="allocation.deadlines_rearmed",
            target=LoopClock.objects.get(name="allocation_loop"),
            after={"allocations": moved, "gap_seconds": int(outage.length.total_seconds())},
            reason=f"allocation loop was away {int(outage.length.total_seconds())} s "
            f"(from {outage.started:%H:%M:%S} UTC); deadlines moved by the gap",
        )
    result.counts["rearmed"] += moved


def _fail_overdue(result: LoopResult, now) -> None:
    overdue = _claim(
        Allocation.objects.filter(state__in=(S.PENDING, S.PROVISIONING), state_deadline__lt=now).select_related(
            "instance_type"
        )
    )
    members = _live_members([a.pk for a in overdue if a.state == S.PROVISIONING])
    for allocation in overdue:
        if allocation.state == S.PENDING:
            reason = (
                f"insufficient capacity: no fabric domain had {allocation.node_count} free "
                f"{allocation.instance_type.slug} node(s) within 10 minutes; ask for fewer nodes and retry"
            )
        else:
            reason = "provisioning did not finish before its deadline; the nodes were released"
            why = _unready_reasons(allocation, members[allocation.pk])
            if why:
                reason = f"{reason}. Not ready: {why}"
            _release_nodes(allocation, members[allocation.pk], reason)
        transition_allocation(allocation, S.FAILED, actor=ACTOR, failure_reason=reason)
        result.counts["failed"] += 1


def _unready_reasons(allocation: Allocation, live: list[AllocationNode]) -> str:
    """Why the allocation's nodes are not ready: the nodes replaced on the way, and the live
    ones still waiting (with their last error)."""
    parts = list(
        AllocationNode.objects.filter(allocation=allocation, end_reason__startswith="replaced")
        .order_by("ended_at")
        .values_list("end_reason", flat=True)[:5]
    )
    for m in live:
        if m.ready_at is None:
            parts.append(
                f"{m.node.hostname} {m.node.lifecycle}" + (f" ({m.node.last_error})" if m.node.last_error else "")
            )
    return "; ".join(parts)[:1500]


def _place_pending(result: LoopResult) -> None:

    for allocation in _claim(
        Allocation.objects.filter(state=S.PENDING, cancel_requested_at__isnull=True).select_related(
            "instance_type", "tenant"
        )
    ):
        try:
            place_allocation(allocation, actor=ACTOR)
        except InsufficientCapacity:
            result.counts["waiting"] += 1
            continue  # level-triggered: retried next pass until its deadline
        transition_allocation(allocation, S.PROVISIONING, actor=ACTOR, reason="placed; agents asked to provision")
        result.counts["placed"] += 1


def _activate(result: LoopResult) -> None:
    candidates = _claim(
        Allocation.objects.filter(Q(state=S.PROVISIONING) | Q(state=S.ACTIVE, degraded=True)).select_related(
            "instance_type", "tenant"
        )
    )
    members = _live_members([a.pk for a in candidates])
    for allocation in candidates:
        live = members[allocation.pk]
        unready = [m for m in live if m.node.lifecycle == Lifecycle.PROVISION_FAILED]
        for m in unready:
            # A node that could not get ready (its provision failed or missed its deadline) is
            # replaced like any pulled node; the tenant sees why in `replaced_nodes`.
            why = m.node.last_error or "provisioning failed"
            replace_node(
                allocation=allocation,
                node=m.node,
                actor=ACTOR,
                reason=f"{m.node.hostname} did not get ready: {why}"[:180],
            )
            result.counts["replaced_unready"] += 1
        if unready:
            continue
        if len(live) < allocation.node_count:
            _retry_replacement(allocation, allocation.node_count - len(live))
            continue
        if len(live) != allocation.node_count or any(m.node.lifecycle != Lifecycle.ACTIVE for m in live):
            continue
        if allocation.state == S.PROVISIONING:
            transition_allocation(allocation, S.ACTIVE, actor=ACTOR, reason="every node reported provisioned")
            result.counts["activated"] += 1
        else:
            Allocation.objects.filter(pk=allocation.pk).update(degraded=False, updated_at=timezone.now())
            record_audit(
                actor=ACTOR,
                action="allocation.restored",
                target=allocation,
                before={"degraded": True},
                after={"degraded": False},
                reason="replacement node active",
            )
            result.counts["restored"] += 1


def _retry_replacement(allocation: Allocation, missing: int) -> None:

    try:
        placed = claim_nodes(
            allocation=allocation,
            instance_type=allocation.instance_type,
            node_count=missing,
            actor=ACTOR,
            role=AllocationNodeRole.REPLACEMENT,
            fabric_domain_id=allocation.fabric_domain_id,
        )
    except InsufficientCapacity:
        return  # stays degraded; retried next pass
    _replaced(allocation, placed, now=timezone.now())


def _serve_drains(result: LoopResult) -> None:
    """An operator drained a node a tenant is using: place a replacement (same generation and
    fabric domain), then stop the drained node; the reconciler wipes it and it stays cordoned."""

    qs = nodes_to_drain()
    if connection.vendor == "postgresql":
        qs = qs.select_for_update(skip_locked=True, of=("self",))
    draining = list(qs[:BATCH])
    if not draining:
        return
    members = {
        m.node_id: m
        for m in AllocationNode.objects.filter(node__in=draining, ended_at__isnull=True).select_related("allocation")
    }
    for node in draining:
        member = members.get(node.pk)
        if member is not None:
            replace_node(allocation=member.allocation, node=node, actor=ACTOR, reason="operator drain")
    running = [n for n in draining if n.pk in members and n.lifecycle in STOPPABLE_STATES]
    stopped = {
        c.node_id
        for c in transition_many(
            running,
            Lifecycle.RELEASING,
            actor=ACTOR,
            action="drain",
            reason="drained: the tenant moved to a replacement node",
        )
    }
    request_agent_actions(
        nodes=[n for n in running if n.pk in stopped],
        action=AgentAction.STOP,
        actor=ACTOR,
        reason="drained by an operator",
    )
    Node.objects.filter(pk__in=[n.pk for n in draining]).update(drain_requested_at=None, drain_deadline=None)
    result.counts["drained"] += len(draining)


def _finish_releases(result: LoopResult, now) -> None:
    """End memberships whose nodes left the in-use states; end allocations with none left."""
    live = AllocationNode.objects.filter(ended_at__isnull=True, allocation__state__in=(S.RELEASING, S.FAILED)).exclude(
        node__lifecycle__in=HELD_STATES
    )
    done = list(live.values_list("id", "node_id", "started_at")[:2000])
    if done:
        _end_memberships(done, "released", now)
    releasing = _claim(Allocation.objects.filter(state=S.RELEASING))
    still = set(
        AllocationNode.objects.filter(allocation__in=releasing, ended_at__isnull=True).values_list(
            "allocation_id", flat=True
        )
    )
    for allocation in releasing:
        if allocation.pk in still:
            continue
        to_state = S.RELEASED if allocation.activated_at else S.CANCELLED
        transition_allocation(allocation, to_state, actor=ACTOR, reason="every node stopped and wiped")
        result.counts[to_state] += 1


def _end_memberships(rows: list[tuple], reason: str, now) -> None:
    """End memberships and record whether each node was wiped (wiping → available) since it started."""
    node_ids = [node_id for _, node_id, _ in rows]
    earliest = min(started for _, _, started in rows)
    wipes: dict = defaultdict(list)
    for node_id, at in NodeEvent.objects.filter(
        node_id__in=node_ids, from_state=Lifecycle.WIPING, to_state=Lifecycle.AVAILABLE, at__gte=earliest
    ).values_list("node_id", "at"):
        wipes[node_id].append(at)
    wiped_ids, unwiped_ids = [], []
    for pk, node_id, started in rows:
        (wiped_ids if any(at >= started for at in wipes[node_id]) else unwiped_ids).append(pk)
    AllocationNode.objects.filter(pk__in=wiped_ids).update(ended_at=now, end_reason=reason, wiped_at=now)
    AllocationNode.objects.filter(pk__in=unwiped_ids).update(ended_at=now, end_reason=reason)


def _mark_wiped() -> None:
    """Memberships ended without a wipe (e.g. a node pulled for health) are cleared once the node
    has gone wiping → available since; until then placement never uses the node."""
    pending = list(
        AllocationNode.objects.filter(ended_at__isnull=False, wiped_at__isnull=True).values_list(
            "id", "node_id", "ended_at"
        )[:2000]
    )
    if not pending:
        return
    node_ids = [n for _, n, _ in pending]
    wipes: dict = defaultdict(list)
    for node_id, at in NodeEvent.objects.filter(
        node_id__in=node_ids, from_state=Lifecycle.WIPING, to_state=Lifecycle.AVAILABLE
    ).values_list("node_id", "at"):
        wipes[node_id].append(at)
    wiped = []
    for pk, node_id, ended in pending:
        seen = [at for at in wipes[node_id] if at >= ended]
        if seen:
            wiped.append(AllocationNode(pk=pk, wiped_at=min(seen)))
    AllocationNode.objects.bulk_update(wiped, ["wiped_at"], batch_size=500)


def run_allocation_loop() -> LoopResult:
    """One pass. Returns what it did; `skipped` when another run holds the lock."""
    result = LoopResult()
    with locked_run("allocation_loop") as acquired:
        if not acquired:
            result.skipped = True
            return result
        now = timezone.now()
        outage = note_run("allocation_loop", now=now, interval=LOOP_INTERVAL)
        if outage is not None:
            _rearm_deadlines(result, outage)
        _serve_cancels(result)
        _place_pending(result)
        _fail_overdue(result, now)
        confirmed = record_confirmations()
        if confirmed:
            result.counts["access_confirmed"] += confirmed
        _activate(result)
        _serve_drains(result)
        _finish_releases(result, now)
        _mark_wiped()
    return result


@transaction.atomic
def replace_node(*, allocation: Allocation, node: Node, actor: str, reason: str) -> AllocationNode | None:
    """Pull `node` out of `allocation` (health), mark it degraded and place one replacement of the same
    type in the same fabric domain. Returns the replacement membership, or None if none is free now
    (the loop keeps trying while the allocation stays degraded)."""

    now = timezone.now()
    ended = AllocationNode.objects.filter(allocation=allocation, node=node, ended_at__isnull=True).update(
        ended_at=now, end_reason=f"replaced: {reason}"[:200]
    )
    if not ended:
        return None
    cancel_access_syncs([node.pk], f"left allocation {allocation.pk}: {reason}")
    Allocation.objects.filter(pk=allocation.pk).update(degraded=True, updated_at=now)
    record_audit(
        actor=actor,
        action="allocation.node_replaced",
        target=allocation,
        before={"degraded": allocation.degraded, "node": str(node.pk)},
        after={"degraded": True},
        reason=reason,
    )
    allocation.degraded = True
    emit_tenant_event(
        tenant_id=allocation.tenant_id,
        event_type="allocation.degraded",
        dedup_key=f"allocation:{allocation.pk}:degraded:{node.pk}",
        data=allocation_event_data(allocation, pulled_node=node.hostname, reason=reason[:200]),
        now=now,
    )
    try:
        placed = claim_nodes(
            allocation=allocation,
            instance_type=allocation.instance_type,
            node_count=1,
            actor=actor,
            role=AllocationNodeRole.REPLACEMENT,
            fabric_domain_id=allocation.fabric_domain_id,
        )
    except InsufficientCapacity:
        return None
    _replaced(allocation, placed, now=now, pulled=node.hostname)
    return AllocationNode.objects.get(allocation=allocation, node=placed[0], ended_at__isnull=True)


def _replaced(allocation: Allocation, placed, *, now, pulled: str = "") -> None:
    """The tenant hears of each replacement node that joined (tenants.notifications)."""
    for replacement in placed:
        emit_tenant_event(
            tenant_id=allocation.tenant_id,
            event_type="allocation.node_replaced",
            dedup_key=f"allocation:{allocation.pk}:node_replaced:{replacement.pk}",
            data=allocation_event_data(allocation, replacement_node=replacement.hostname, pulled_node=pulled),
            now=now,
        )
