"""Rolling upgrades: move a set of nodes to a software baseline in waves, never below the
capacity floor, stopping on a failing canary.

A rollout's nodes are planned into waves when it is created (`plan_waves`): wave 0 is the
canary, each later wave holds at most `wave_size` nodes and at most `max_domain_share` of any
fabric domain's nodes of the type, so no domain loses more than that share at once. The loop
(`advance_rollouts`) then walks every node through

    pending → (waiting_free →) upgrading → validating → done | failed | skipped

- a node is *taken* only in its rollout's current wave, while the rollout runs, and only if the
  type's free GPUs stay at or above `capacity_floor_gpus` once it is out; a free node is
  cordoned and gets an `upgrade` work item; a node carrying a tenant is cordoned (no new
  placements) and waits for the tenant to leave until `drain_minutes` pass — then it is skipped,
  or, on a forced rollout (with a reason), drained: the allocation loop moves the tenant off;
- a succeeded upgrade sends the node through validation (`validating`, DCGM r3: the health
  app's gate decides); a failed one fails the node, which stays cordoned for an operator;
- a node the gate returned to `available` whose inventory shows the baseline is done and
  uncordoned; one the gate sent to triage failed.

The canary wave must finish without a failure, and no more than `max_failures` nodes may fail,
or the rollout pauses with the reason; a paused rollout takes no new nodes but still sees the
ones in flight through. Level-triggered and idempotent: each pass reads where every node is;
each node's step is its own transaction, so a worker killed mid-pass leaves every node either
stepped or untouched, and the next pass resumes without redoing a node. One pass at a time
(advisory lock), rollout rows claimed with SKIP LOCKED.
"""

import math
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import timedelta

from django.db import connection, transaction
from django.utils import timezone

from core.errors import Conflict, Invalid
from core.locks import locked_run
from core.services.audit import record_audit
from fleet.choices import ROLLOUT_NODE_FINISHED, AgentAction, AgentActionState, Health, RolloutState
from fleet.choices import Lifecycle as L
from fleet.choices import RolloutNodeState as S
from fleet.models import Node, NodeAgentAction, Rollout, RolloutNode, SoftwareBaseline
from fleet.selectors import drift_from, occupied_node_ids

from .agent_work import request_agent_action
from .lifecycle import record_node_event, transition

ACTOR = "system:rollouts"
TIME_BUDGET_S = 20.0
MAX_NODES = 5000
PLACEABLE_HEALTH = (Health.HEALTHY, Health.DEGRADED)  # as placement counts free capacity
_IN_FLEET_GONE = (L.RETIRED, L.DISPOSED, L.DECOMMISSIONING, L.SANITIZING)


def plan_waves(nodes: list[Node], *, canary_size: int, wave_size: int, share, domain_sizes: dict) -> dict:
    """node id → wave. Canary first (spread over domains), then waves of at most `wave_size`,
    each taking at most ceil-free `floor(share × domain size)` (at least 1) from any domain."""
    by_domain: dict = defaultdict(list)
    for node in sorted(nodes, key=lambda n: n.hostname):
        by_domain[node.fabric_domain_id].append(node)
    cap = {d: max(1, math.floor(float(share) * domain_sizes.get(d, len(ns)))) for d, ns in by_domain.items()}
    queues = {d: list(ns) for d, ns in sorted(by_domain.items(), key=lambda kv: str(kv[0]))}
    waves: dict = {}
    wave = 0
    while any(queues.values()):
        limit = canary_size if wave == 0 else wave_size
        taken: dict = defaultdict(int)
        picked = 0
        progress = True
        while picked < limit and progress:
            progress = False
            for domain, queue in queues.items():
                if queue and picked < limit and taken[domain] < cap[domain]:
                    waves[queue.pop(0).pk] = wave
                    taken[domain] += 1
                    picked += 1
                    progress = True
        wave += 1
    return waves


def _snapshot(rollout: Rollout) -> dict:
    return {"state": rollout.state, "paused_reason": rollout.paused_reason}


@transaction.atomic
def create_rollout(
    *,
    baseline: SoftwareBaseline,
    actor: str,
    name: str = "",
    node_ids=None,
    canary_size: int = 1,
    wave_size: int = 4,
    max_domain_share=0.25,
    capacity_floor_gpus: int = 0,
    max_failures: int = 0,
    drain_minutes: int = 120,
    force: bool = False,
    force_reason: str = "",
) -> Rollout:
    """Plan and start a rollout of `baseline` over `node_ids` (default: every node of the
    baseline's type in the fleet that is off it)."""
    if force and not force_reason.strip():
        raise Invalid("A forced rollout evicts tenants at the drain deadline; say why in force_reason.")
    node_type = baseline.node_type
    fleet = Node.objects.filter(node_type=node_type).exclude(lifecycle__in=_IN_FLEET_GONE)
    if node_ids is not None:
        node_ids = list(dict.fromkeys(node_ids))
        nodes = list(fleet.filter(pk__in=node_ids))
        if len(nodes) != len(node_ids):
            raise Invalid(
                f"Every node must be a {node_type.slug} in the fleet; {len(node_ids) - len(nodes)} of "
                f"{len(node_ids)} are not.",
                code="invalid_nodes",
            )
    else:
        candidates = list(fleet)
        drift = drift_from(candidates, baseline.versions)
        nodes = [n for n in candidates if drift[n.pk] is None or drift[n.pk]]
    if not nodes:
        raise Invalid(f"No {node_type.slug} node needs {baseline.name}: nothing to roll out.", code="nothing_to_do")
    if len(nodes) > MAX_NODES:
        raise Invalid(f"At most {MAX_NODES} nodes per rollout; split this one.")
    busy = Rollout.objects.filter(
        nodes__node__in=nodes, nodes__state__in=[s for s in S.values if s not in ROLLOUT_NODE_FINISHED]
    ).exclude(state__in=(RolloutState.COMPLETED, RolloutState.CANCELLED))
    if busy.exists():
        raise Conflict(f"Some of these nodes are in rollout {busy.first().name!r} already; finish or cancel it first.")
    domain_sizes = defaultdict(int)
    for domain_id in fleet.values_list("fabric_domain_id", flat=True):
        domain_sizes[domain_id] += 1
    rollout = Rollout.objects.create(
        name=name or f"{baseline.name} on {node_type.slug}",
        baseline=baseline,
        canary_size=canary_size,
        wave_size=wave_size,
        max_domain_share=max_domain_share,
        capacity_floor_gpus=capacity_floor_gpus,
        max_failures=max_failures,
        drain_minutes=drain_minutes,
        force=force,
        force_reason=force_reason,
        created_by=actor,
    )
    waves = plan_waves(
        nodes, canary_size=canary_size, wave_size=wave_size, share=max_domain_share, domain_sizes=domain_sizes
    )
    RolloutNode.objects.bulk_create([RolloutNode(rollout=rollout, node=n, wave=waves[n.pk]) for n in nodes])
    record_audit(
        actor=actor,
        action="rollout.create",
        target=rollout,
        after={"baseline": baseline.name, "nodes": len(nodes), "waves": max(waves.values()) + 1, "force": force},
        reason=force_reason,
    )
    return rollout


CONTROL = {"pause": RolloutState.PAUSED, "resume": RolloutState.RUNNING, "cancel": RolloutState.CANCELLED}


@transaction.atomic
def control_rollout(*, rollout: Rollout, action: str, actor: str, reason: str = "") -> Rollout:
    rollout = Rollout.objects.select_for_update().get(pk=rollout.pk)
    allowed = {
        "pause": (RolloutState.RUNNING,),
        "resume": (RolloutState.PAUSED,),
        "cancel": (RolloutState.RUNNING, RolloutState.PAUSED),
    }
    if action not in CONTROL:
        raise Invalid(f"action must be one of {', '.join(CONTROL)}.")
    if rollout.state not in allowed[action]:
        raise Conflict(
            f"Rollout {rollout.name!r} is {rollout.state}; {action} is allowed only when {' or '.join(allowed[action])}."
        )
    before = _snapshot(rollout)
    rollout.state = CONTROL[action]
    rollout.paused_reason = reason if action == "pause" else ""
    if action == "cancel":
        # nodes not yet taken are left alone; nodes waiting for their tenant are given back
        waiting = list(rollout.nodes.filter(state=S.WAITING_FREE).select_related("node"))
        for entry in waiting:
            _release(entry.node, actor=actor, reason=f"rollout {rollout.name} cancelled")
        rollout.nodes.filter(state__in=(S.PENDING, S.WAITING_FREE)).update(
            state=S.SKIPPED, detail=f"rollout cancelled: {reason or 'no reason given'}", finished_at=timezone.now()
        )
        rollout.finished_at = timezone.now()
    rollout.save(update_fields=["state", "paused_reason", "finished_at", "updated_at"])
    record_audit(
        actor=actor, action=f"rollout.{action}", target=rollout, before=before, after=_snapshot(rollout), reason=reason
    )
    return rollout


# ---- the loop --------------------------------------------------------------------------------


def _cordon(node: Node, reason: str) -> None:
    Node.objects.filter(pk=node.pk).update(cordoned=True, cordon_reason=reason[:200], updated_at=timezone.now())
    node.cordoned, node.cordon_reason = True, reason[:200]


def _release(node: Node, *, actor: str, reason: str) -> None:
    """Give the node back: uncordon it if this rollout cordoned it."""
    if node.cordoned and node.cordon_reason.startswith("rollout "):
        Node.objects.filter(pk=node.pk).update(cordoned=False, cordon_reason="", updated_at=timezone.now())
        node.cordoned = False
        record_node_event(node, actor=actor, action="rollout.release", reason=reason)


def free_gpus(node_type) -> int:
    """What placement could still give tenants now: available, uncordoned, healthy nodes' GPUs."""
    count = Node.objects.filter(
        node_type=node_type, lifecycle=L.AVAILABLE, cordoned=False, health__in=PLACEABLE_HEALTH
    ).count()
    return count * node_type.gpus_per_node


@dataclass
class RolloutPass:
    rollouts: int = 0
    taken: int = 0
    stepped: int = 0
    completed: int = 0
    paused: int = 0
    skipped: bool = False

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def _log(entry: RolloutNode, rollout: Rollout, step: str, detail: str) -> None:
    entry.detail = detail[:2000]
    record_node_event(entry.node, actor=ACTOR, action=f"rollout.{step}", reason=f"{rollout.name}: {detail}"[:2000])
    record_audit(
        actor=ACTOR,
        action=f"rollout.node_{step}",
        target=rollout,
        after={"node": entry.node.hostname, "state": entry.state, "wave": entry.wave},
        reason=detail[:500],
    )


def _step_in_flight(entry: RolloutNode, rollout: Rollout, now, result: RolloutPass) -> None:
    node = entry.node
    if entry.state == S.WAITING_FREE:
        if not occupied_node_ids([node.pk]) and node.lifecycle == L.AVAILABLE:
            _start_upgrade(entry, rollout, now, "the tenant left")
        elif now >= entry.deadline:
            if rollout.force and not node.drain_deadline:
                Node.objects.filter(pk=node.pk).update(drain_requested_at=now, drain_deadline=now, updated_at=now)
                _log(entry, rollout, "evict", f"still in use at the drain deadline; forced: {rollout.force_reason}")
            elif not rollout.force:
                entry.state, entry.finished_at = S.SKIPPED, now
                _release(node, actor=ACTOR, reason=f"rollout {rollout.name}: skipped, tenant still on it")
                _log(
                    entry,
                    rollout,
                    "skip",
                    "still in use at the drain deadline; not evicted (the rollout is not forced)",
                )
        else:
            return
    elif entry.state == S.UPGRADING:
        action = NodeAgentAction.objects.filter(pk=entry.action_id).first()
        if action is None or action.state == AgentActionState.PENDING:
            return
        if action.state == AgentActionState.SUCCEEDED:
            transition(node, L.VALIDATING, actor=ACTOR, action="rollout", reason=f"{rollout.name}: upgraded")
            request_agent_action(node=node, action=AgentAction.DCGM_R3, actor=ACTOR, reason=f"rollout {rollout.name}")
            entry.state = S.VALIDATING
            _log(entry, rollout, "validate", f"upgrade done ({action.detail}); validating through the gate")
        else:
            entry.state, entry.finished_at = S.FAILED, now
            Node.objects.filter(pk=node.pk).update(cordon_reason=f"upgrade to {rollout.baseline.name} failed"[:200])
            _log(entry, rollout, "fail", f"upgrade {action.state}: {action.detail or 'no detail'}")
    elif entry.state == S.VALIDATING:
        if node.lifecycle == L.AVAILABLE:
            drift = drift_from([node], rollout.baseline.versions)[node.pk]
            if drift is None or drift:
                return  # the gate passed; the agent's report of the new stack is still on its way
            entry.state, entry.finished_at = S.DONE, now
            _release(node, actor=ACTOR, reason=f"rollout {rollout.name}: on {rollout.baseline.name}")
            if entry.kept_cordon:
                Node.objects.filter(pk=node.pk).update(cordoned=True, cordon_reason=entry.kept_cordon, updated_at=now)
            _log(entry, rollout, "done", f"validated and on {rollout.baseline.name}")
        elif node.lifecycle != L.VALIDATING:
            entry.state, entry.finished_at = S.FAILED, now
            _log(entry, rollout, "fail", f"validation failed: the node went to {node.lifecycle} ({node.last_error})")
        else:
            return
    else:
        return
    entry.save(update_fields=["state", "action", "deadline", "taken_at", "finished_at", "detail", "kept_cordon"])
    result.stepped += 1


def _start_upgrade(entry: RolloutNode, rollout: Rollout, now, why: str) -> None:
    action = request_agent_action(
        node=entry.node,
        action=AgentAction.UPGRADE,
        actor=ACTOR,
        params={"versions": rollout.baseline.versions, "rollout_id": str(rollout.pk)},
        reason=f"rollout {rollout.name}",
    )
    entry.state, entry.action, entry.taken_at = S.UPGRADING, action, entry.taken_at or now
    _log(entry, rollout, "upgrade", f"{why}; upgrading to {rollout.baseline.name}")


def _take(entry: RolloutNode, rollout: Rollout, now, result: RolloutPass) -> bool:
    """Take a pending node of the current wave if the floor allows; False when the floor stops it."""
    node = entry.node
    busy = bool(occupied_node_ids([node.pk]))
    if not busy and node.lifecycle != L.AVAILABLE:
        return True  # not in a state to upgrade (in repair, validating, wiping, ...): wait for it
    node_type = rollout.baseline.node_type
    if not busy and not node.cordoned and node.health in PLACEABLE_HEALTH:
        if free_gpus(node_type) - node_type.gpus_per_node < rollout.capacity_floor_gpus:
            return False
    if node.cordoned:  # an operator's cordon (and its reason) stays theirs to lift
        entry.kept_cordon = node.cordon_reason
    else:
        _cordon(node, f"rollout {rollout.name}")
    if busy:
        entry.state, entry.deadline = S.WAITING_FREE, now + timedelta(minutes=rollout.drain_minutes)
        entry.taken_at = now
        _log(entry, rollout, "wait", f"cordoned; waiting up to {rollout.drain_minutes} min for the tenant to leave")
    else:
        _start_upgrade(entry, rollout, now, "free")
    entry.save(update_fields=["state", "action", "deadline", "taken_at", "finished_at", "detail", "kept_cordon"])
    result.taken += 1
    return True


def _pause(rollout: Rollout, reason: str, result: RolloutPass) -> None:
    before = _snapshot(rollout)
    rollout.state, rollout.paused_reason = RolloutState.PAUSED, reason[:500]
    rollout.save(update_fields=["state", "paused_reason", "updated_at"])
    record_audit(
        actor=ACTOR, action="rollout.pause", target=rollout, before=before, after=_snapshot(rollout), reason=reason
    )
    result.paused += 1


def _advance_rollout(rollout_id, now, result: RolloutPass, after_node) -> None:
    # in flight first, each node its own transaction
    entries = list(
        RolloutNode.objects.filter(rollout_id=rollout_id)
        .select_related("node__node_type", "rollout__baseline__node_type")
        .order_by("wave", "node__hostname")
    )
    for entry in entries:
        if entry.state in (S.WAITING_FREE, S.UPGRADING, S.VALIDATING):
            with transaction.atomic():
                entry.node = Node.objects.select_for_update().get(pk=entry.node_id)
                _step_in_flight(entry, entry.rollout, now, result)
            if after_node is not None:
                after_node(entry)
    with transaction.atomic():
        qs = Rollout.objects.filter(pk=rollout_id)
        if connection.features.has_select_for_update_skip_locked:
            qs = qs.select_for_update(skip_locked=True)
        rollout = qs.select_related("baseline__node_type").first()
        if rollout is None:
            return
        entries = list(
            RolloutNode.objects.filter(rollout=rollout).select_related("node").order_by("wave", "node__hostname")
        )
        failed = [e for e in entries if e.state == S.FAILED]
        canary = [e for e in entries if e.wave == 0]
        if rollout.state == RolloutState.RUNNING:
            if any(e.state == S.FAILED for e in canary):
                bad = next(e for e in canary if e.state == S.FAILED)
                _pause(rollout, f"canary {bad.node.hostname} failed: {bad.detail}", result)
            elif len(failed) > rollout.max_failures:
                _pause(rollout, f"{len(failed)} nodes failed, more than the {rollout.max_failures} allowed", result)
        unfinished = [e for e in entries if e.state not in ROLLOUT_NODE_FINISHED]
        if not unfinished:
            if rollout.state in (RolloutState.RUNNING,):
                rollout.state, rollout.finished_at = RolloutState.COMPLETED, now
                rollout.save(update_fields=["state", "finished_at", "updated_at"])
                record_audit(actor=ACTOR, action="rollout.complete", target=rollout, after=_snapshot(rollout))
                result.completed += 1
            return
        if rollout.state != RolloutState.RUNNING:
            return
        wave = min(e.wave for e in unfinished)
        for entry in (e for e in unfinished if e.wave == wave and e.state == S.PENDING):
            entry.rollout = rollout
            entry.node = Node.objects.select_for_update().get(pk=entry.node_id)
            if not _take(entry, rollout, now, result):
                break  # the floor: take nothing more of this wave until capacity comes back


def rollouts_pass(*, now=None, time_budget_s: float = TIME_BUDGET_S, after_node=None) -> RolloutPass:
    started = time.monotonic()
    result = RolloutPass()
    for rollout_id in (
        Rollout.objects.filter(state__in=(RolloutState.RUNNING, RolloutState.PAUSED))
        .order_by("created_at")
        .values_list("pk", flat=True)
    ):
        if time.monotonic() - started > time_budget_s:
            break
        _advance_rollout(rollout_id, now or timezone.now(), result, after_node)
        result.rollouts += 1
    return result


def advance_rollouts(**kwargs) -> RolloutPass:
    """The loop's entry point (Celery beat, `run_loops`): one pass under the advisory lock."""
    with locked_run("advance_rollouts") as acquired:
        if not acquired:
            return RolloutPass(skipped=True)
        return rollouts_pass(**kwargs)
