"""The health sweep (every 30 s): lease, roll-up, policy, remediation, gate.

Level-triggered and idempotent: each step looks at current state (conditions, lifecycle,
agent actions) and moves only what is not yet where the policy wants it, so a second sweep
over the same signals does nothing new. Every step is a fixed number of batched queries
(grouped by severity or state, never per node); lifecycle moves go through
fleet.services.lifecycle.transition_many.
"""

import logging
from datetime import datetime

from django.db import transaction
from django.db.models import Case, CharField, Count, Exists, OuterRef, Q, Value, When

from core import clock
from core.bulk import update_rows
from core.locks import locked_run
from core.services.loop_clock import note_run, resumed_at
from fleet.choices import AgentAction, AgentActionState, Attribution, Health, Lifecycle, PowerAction, PowerActionState
from fleet.models import BMCPowerAction, Node, NodeAgentAction
from fleet.services.agent_work import request_agent_actions
from fleet.services.lifecycle import state_entered_at, transition_many
from fleet.services.power_actions import nodes_with_bmc, request_power_actions
from health.choices import (
    ACTIONABLE,
    HELD,
    SEVERITY_RANK,
    TO_TRIAGE,
    ConditionEventKind,
    ConditionStatus,
    IncidentState,
    IncidentStep,
)
from health.choices import Severity as S
from health.models import Condition, ConditionEvent
from health.policy import (
    CONTROL_PLANE_SIGNALS,
    EVENT_EXPIRY,
    GATE_AFTER_REBOOT,
    GATE_AFTER_RESET,
    HEARTBEAT_LOST_AFTER,
    HEARTBEAT_UNKNOWN_AFTER,
    HISTORY_RETENTION,
    REPAIR_TICKET,
    REPEAT_WINDOW,
    SOFTWARE_SIGNALS,
    SWEEP_INTERVAL,
)
from health.services.conditions import apply_observations
from health.services.escalations import (
    escalate_app_xid_repeats,
    escalate_thermal,
    hold_for_operator,
    hold_nvlink_domains,
    queue_idle_diagnostics,
)
from health.services.fabric import fabric_held, judge_fabric
from health.services.gate import apply_gate, send_repeat_triage_to_rma
from health.services.incidents import (
    open_incidents_by_node,
    open_policy_incidents,
    record_impacts,
    record_step,
)
from health.services.lapses import judge_lapses, note_control_plane_outage, open_hold, recently_released
from tenants.models import AllocationNode
from tenants.services.allocation_loop import replace_node

logger = logging.getLogger(__name__)

ACTOR = "system:health_sweep"
POLICY_LIFECYCLES = (Lifecycle.AVAILABLE, Lifecycle.ACTIVE, Lifecycle.PROVISIONING)  # what the policy may pull
LEASE_LIFECYCLES = (Lifecycle.AVAILABLE, Lifecycle.ACTIVE, Lifecycle.PROVISIONING)
# Severities that pull a node; DEFER pulls (as a GPU reset) only a node no tenant holds.
PULLING = (*ACTIONABLE, S.DEFER)


def run_health_sweep(now: datetime | None = None) -> dict:
    """One pass under the `health_sweep` advisory lock (skipped if another run holds it)."""
    with locked_run("health_sweep") as acquired:
        if not acquired:
            return {"skipped": True}
        return sweep(now=now or clock.now())


def sweep(*, now: datetime) -> dict:
    # Was the control plane away? Then nothing is judged for the time nobody could act in.
    outage = note_run("health_sweep", now=now, interval=SWEEP_INTERVAL)
    note_control_plane_outage(outage=outage, now=now, actor=ACTOR)
    resumed = resumed_at("health_sweep")
    summary = {"pruned": _prune(now), "control_plane_outage_s": int(outage.length.total_seconds()) if outage else 0}
    summary.update(judge_lapses(now=now, resumed=resumed, actor=ACTOR))
    summary.update(judge_fabric(now=now, actor=ACTOR))  # before the policy: a dead leaf is not N cable faults
    summary["heartbeat_lost"] = _lease(now, resumed)
    summary["thermal_throttle"] = escalate_thermal(now)
    summary["app_xid_repeat"] = escalate_app_xid_repeats(now)
    _roll_up(now)
    summary.update(_apply_policy(now))
    summary.update(hold_for_operator(now, ACTOR))
    summary.update(hold_nvlink_domains(now, ACTOR))
    summary["remediating"] = _finish_drains(now)
    summary.update(_remediate(now))
    summary.update(apply_gate(now=now, actor=ACTOR))
    summary.update(queue_idle_diagnostics(now, ACTOR))
    return summary


def _prune(now: datetime) -> int:
    """Bounded history: drop old events; expire info/warn event signals that stopped recurring."""
    pruned, _ = ConditionEvent.objects.filter(at__lt=now - HISTORY_RETENTION).delete()
    Condition.objects.filter(
        status=ConditionStatus.ACTIVE,
        severity__in=(S.INFO, S.WARN),
        signal__startswith="xid_",
        last_seen__lt=now - EVENT_EXPIRY,
    ).update(status=ConditionStatus.CLEARED, last_seen=now)
    return pruned


def _lease(now: datetime, resumed: datetime | None) -> int:
    """Nodes that reported once and then went silent for 300 s raise heartbeat_lost. Nodes
    that never reported (no agent yet) stay `unknown` without action.

    The lease counts only time the control plane was there to hear: it restarts when the
    sweep resumes after an outage and when a correlated-lapse hold hands a node back, and a
    node under a hold (dead leaf, rack, site) is never judged on its own."""
    cutoff = now - HEARTBEAT_LOST_AFTER
    if resumed is not None and resumed > cutoff:
        return 0
    lost_ids = list(
        Node.objects.filter(lifecycle__in=LEASE_LIFECYCLES, last_heartbeat_at__lt=cutoff)
        .exclude(
            Exists(
                Condition.objects.filter(
                    node=OuterRef("pk"), gpu_index__isnull=True, signal="heartbeat_lost", status=ConditionStatus.ACTIVE
                )
            )
        )
        .exclude(open_hold())
        .exclude(recently_released(cutoff))
        .values_list("pk", flat=True)
    )
    if not lost_ids:
        return 0
    detail = f"no heartbeat for {int(HEARTBEAT_LOST_AFTER.total_seconds())} s"
    # A node alone in its rack: its silence is the rack's too, and the incident says so.
    alone = {
        node_id: name
        for node_id, name, peers in Node.objects.filter(pk__in=lost_ids, rack__isnull=False)
        .annotate(peers=Count("rack__nodes", filter=Q(rack__nodes__lifecycle__in=LEASE_LIFECYCLES)))
        .values_list("pk", "rack__name", "peers")
        if peers == 1
    }
    return apply_observations(
        observed={
            n: {(None, "heartbeat_lost"): detail + (f"; rack {alone[n]} is dark (its only node)" if n in alone else "")}
            for n in lost_ids
        },
        now=now,
        load_signals=["heartbeat_lost"],
    )


def _roll_up(now: datetime) -> None:
    """Node.health from conditions and the lease, in two UPDATEs whatever the fleet size.

    The fresh nodes' health is one CASE over two correlated EXISTS probes on the
    (node, status, severity) index, written only where it differs. Kept inside a CASE the
    probes stay per-node subplans: as top-level (NOT) EXISTS filters PostgreSQL turned them
    into anti-joins whose plan, on statistics older than the conditions (a burst of new
    rows), cost seconds.
    """
    stale = Q(last_heartbeat_at__isnull=True) | Q(last_heartbeat_at__lt=now - HEARTBEAT_UNKNOWN_AFTER)
    Node.objects.filter(stale).exclude(health=Health.UNKNOWN).update(health=Health.UNKNOWN)
    active = Condition.objects.filter(node=OuterRef("pk"), status=ConditionStatus.ACTIVE)
    wanted = Case(
        When(Exists(active.filter(severity__in=ACTIONABLE)), then=Value(Health.UNHEALTHY)),
        When(Exists(active.filter(severity__in=(S.WARN, *HELD))), then=Value(Health.DEGRADED)),
        default=Value(Health.HEALTHY),
        output_field=CharField(),
    )
    Node.objects.exclude(stale).exclude(health=wanted).update(health=wanted)


def decide(rows: list[dict], repeats: set, tenanted: set = frozenset()) -> dict:
    """{node_id: (severity, [signals])} for nodes the policy must pull, from their active
    conditions (`rows`: node_id, signal, severity). A hold (an operator decides) keeps a node
    whose worst signal is a hold or a deferred reset; a deferred reset pulls, as a GPU reset,
    only a node no tenant holds (`tenanted`); a hardware signal raised twice in the repeat
    window (`repeats`: (node, signal)) is fatal."""
    by_node: dict = {}
    for row in rows:
        by_node.setdefault(row["node_id"], []).append(row)
    decisions: dict = {}
    for node_id, conds in by_node.items():
        actionable = [c for c in conds if c["severity"] in ACTIONABLE]
        if not actionable:
            deferred = [c for c in conds if c["severity"] == S.DEFER]
            held = any(c["severity"] == S.HOLD for c in conds)
            if deferred and not held and node_id not in tenanted:
                decisions[node_id] = (S.RESET, sorted(c["signal"] for c in deferred))
            continue
        severity = max((c["severity"] for c in actionable), key=SEVERITY_RANK.__getitem__)
        if any((node_id, c["signal"]) in repeats for c in actionable):
            severity = S.FATAL
        decisions[node_id] = (severity, sorted(c["signal"] for c in actionable))
    return decisions


def _apply_policy(now: datetime) -> dict:
    rows = list(
        Condition.objects.filter(status=ConditionStatus.ACTIVE, node__lifecycle__in=POLICY_LIFECYCLES)
        .filter(severity__in=(*ACTIONABLE, *HELD))
        .exclude(fabric_held())
        .values("node_id", "signal", "severity", "count")
    )
    if not rows:
        return {"pulled": 0}
    node_ids = {r["node_id"] for r in rows}
    repeats = {
        (r["node_id"], r["signal"])
        for r in ConditionEvent.objects.filter(
            node_id__in=node_ids,
            kind=ConditionEventKind.RAISED,
            severity__in=(S.RESET, S.REBOOT),
            at__gte=now - REPEAT_WINDOW,
        )
        .exclude(signal__in=list(SOFTWARE_SIGNALS))
        .values("node_id", "signal")
        .annotate(n=Count("id"))
        .filter(n__gte=2)
    }
    live = set(
        AllocationNode.objects.filter(node_id__in=node_ids, ended_at__isnull=True).values_list("node_id", flat=True)
    )
    decisions = decide(rows, repeats, live)
    if not decisions:
        return {"pulled": 0}
    nodes = list(
        Node.objects.filter(pk__in=list(decisions), lifecycle__in=POLICY_LIFECYCLES)
        .select_for_update(skip_locked=True)
        .select_related("node_type")
    )
    by_severity: dict = {}
    for node in nodes:
        by_severity.setdefault(decisions[node.pk][0], []).append(node)
    pulled: list[Node] = []
    for severity, group in by_severity.items():
        changes = transition_many(
            group,
            Lifecycle.QUARANTINED,
            actor=ACTOR,
            action="health_quarantine",
            reason=f"health policy: {severity}-class signal",
        )
        moved = {c.node_id for c in changes}
        pulled += [n for n in group if n.pk in moved]
    if not pulled:
        return {"pulled": 0}
    for node in pulled:
        severity, signals = decisions[node.pk]
        node.cordoned, node.attribution = True, Attribution.PROVIDER
        node.cordon_reason = f"health ({severity}): {', '.join(signals)}"[:200]
        node.last_error = node.cordon_reason
    update_rows(Node, pulled, ["cordoned", "cordon_reason", "attribution", "last_error"], using="default")
    signals_by_node = {n.pk: decisions[n.pk][1] for n in pulled}
    # A tenant with root writes what its node's agent reports: a pull on those signals alone,
    # while the node is in a tenant's allocation, is the node's word, not the provider's fault.
    tenanted = set(
        AllocationNode.objects.filter(node__in=pulled, ended_at__isnull=True).values_list("node_id", flat=True)
    )
    attribution_of = {
        n.pk: Attribution.UNCONFIRMED
        for n in pulled
        if n.pk in tenanted and not set(signals_by_node[n.pk]) & CONTROL_PLANE_SIGNALS
    }
    for severity, group in by_severity.items():
        members = [n for n in group if n in pulled]
        open_policy_incidents(
            nodes=members,
            severity=severity,
            signals_by_node=signals_by_node,
            now=now,
            actor=ACTOR,
            attribution_of=attribution_of,
        )
    fatal = [n for n in pulled if decisions[n.pk][0] in TO_TRIAGE]
    transition_many(
        fatal,
        Lifecycle.TRIAGE,
        actor=ACTOR,
        action="health_triage",
        reason="health signal that needs hands (fatal, or a repair ticket)",
    )
    tickets = [n for n in pulled if decisions[n.pk][0] == S.REPAIR]
    if tickets:
        record_step(
            node_ids=[n.pk for n in tickets],
            step=IncidentStep.DIAGNOSE,
            actor=ACTOR,
            now=now,
            state=IncidentState.DIAGNOSED,
            detail=REPAIR_TICKET,
        )
    transition_many(
        [n for n in pulled if n not in fatal],
        Lifecycle.DRAINING,
        actor=ACTOR,
        action="health_drain",
        reason="draining after quarantine",
    )
    record_step(
        node_ids=[n.pk for n in pulled],
        step=IncidentStep.STABILISE,
        actor=ACTOR,
        now=now,
        state=IncidentState.STABILISED,
        detail="quarantined and cordoned (attribution: provider)",
    )
    if fatal:
        record_step(
            node_ids=[n.pk for n in fatal],
            step=IncidentStep.DIAGNOSE,
            actor=ACTOR,
            now=now,
            state=IncidentState.DIAGNOSED,
            detail="fatal signal: sent to triage (repair or RMA)",
        )
        send_repeat_triage_to_rma(node_ids=[n.pk for n in fatal], now=now, actor=ACTOR)
    replaced = _replace_in_allocations(pulled, now)
    return {"pulled": len(pulled), "replaced": replaced}


def _replace_in_allocations(pulled: list[Node], now: datetime) -> int:
    """Pulled nodes in a live allocation: record the impact (for the SLA credit) and ask
    tenancy for a same-generation, same-fabric replacement (marks the allocation degraded)."""

    memberships = list(
        AllocationNode.objects.filter(node__in=pulled, ended_at__isnull=True).select_related(
            "allocation", "node__node_type"
        )
    )
    if not memberships:
        return 0
    incident_of = open_incidents_by_node([m.node_id for m in memberships])
    record_impacts(incident_of=incident_of, memberships=memberships, now=now)

    replaced = 0
    for m in memberships:
        try:
            with transaction.atomic():
                replacement = replace_node(
                    allocation=m.allocation, node=m.node, actor=ACTOR, reason=f"health policy pulled {m.node.hostname}"
                )
        except Exception as exc:  # the pull must stand even when placing a replacement fails
            logger.exception("replacing %s in allocation %s failed", m.node.hostname, m.allocation_id)
            record_step(
                node_ids=[m.node_id],
                step=IncidentStep.STABILISE,
                actor=ACTOR,
                now=now,
                detail=f"replacement for allocation {m.allocation.name} failed: {exc}",
            )
            continue
        replaced += 1
        hostname = replacement.node.hostname if replacement else "none free yet; the allocation loop keeps trying"
        record_step(
            node_ids=[m.node_id],
            step=IncidentStep.STABILISE,
            actor=ACTOR,
            now=now,
            detail=f"allocation {m.allocation.name} degraded; replacement: {hostname}",
        )
    return replaced


def _actionable_severity(node_ids) -> dict:
    """{node_id: highest actionable severity} over active conditions (one query); a deferred
    reset the node was pulled for counts as the GPU reset it is."""
    worst: dict = {}
    for node_id, severity in Condition.objects.filter(
        node_id__in=node_ids, status=ConditionStatus.ACTIVE, severity__in=PULLING
    ).values_list("node_id", "severity"):
        severity = S.RESET if severity == S.DEFER else severity
        if SEVERITY_RANK[severity] > SEVERITY_RANK.get(worst.get(node_id), -1):
            worst[node_id] = severity
    return worst


def _finish_drains(now: datetime) -> int:
    """Health-pulled draining nodes with no live allocation left go on to remediation."""

    live = AllocationNode.objects.filter(node=OuterRef("pk"), ended_at__isnull=True)
    pulled = Condition.objects.filter(node=OuterRef("pk"), status=ConditionStatus.ACTIVE, severity__in=PULLING)
    nodes = list(
        Node.objects.filter(lifecycle=Lifecycle.DRAINING, attribution=Attribution.PROVIDER)
        .filter(Exists(pulled))
        .exclude(Exists(live))
        .select_for_update(skip_locked=True)
    )
    changes = transition_many(
        nodes, Lifecycle.REMEDIATING, actor=ACTOR, action="health_remediate", reason="drained; remediating"
    )
    return len(changes)


def _remediation_actions(ids) -> dict:
    """{node_id: [(kind, state, created)]}, oldest first: the agent's GPU resets and reboots and
    the BMC's power cycles, in one vocabulary (kind REBOOT for both ways of power cycling)."""
    actions: dict = {}
    for node_id, action, state, created in NodeAgentAction.objects.filter(
        node_id__in=ids, action__in=(AgentAction.GPU_RESET, AgentAction.REBOOT)
    ).values_list("node_id", "action", "state", "created_at"):
        actions.setdefault(node_id, []).append((action, state, created))
    bmc_state = {
        PowerActionState.SUCCEEDED: AgentActionState.SUCCEEDED,
        PowerActionState.FAILED: AgentActionState.FAILED,
    }
    for node_id, state, created, detail in BMCPowerAction.objects.filter(
        node_id__in=ids, action=PowerAction.POWER_CYCLE
    ).values_list("node_id", "state", "created_at", "detail"):
        actions.setdefault(node_id, []).append(
            (AgentAction.REBOOT, bmc_state.get(state, AgentActionState.PENDING), created, detail)
        )
    for rows in actions.values():
        rows.sort(key=lambda row: row[2])
    return actions


def _remediate(now: datetime) -> dict:
    """Remediating nodes: queue a GPU reset (in band, the agent) or a power cycle — out of band
    through the BMC where the node has one, so a hung or OS-less node can still be cycled; the
    agent's reboot only where it has none. On success → validating (and queue the validation
    checks: the node comes back only through them); on failure → triage."""
    nodes = list(
        Node.objects.filter(lifecycle=Lifecycle.REMEDIATING)
        .select_for_update(skip_locked=True)
        .only("id", "hostname", "lifecycle", "state_deadline", "state_entered_at")
    )
    if not nodes:
        return {"queued": 0, "validating": 0, "bmc_power_cycles": 0}
    ids = [n.pk for n in nodes]
    actions = _remediation_actions(ids)
    worst = _actionable_severity(ids)
    out_of_band = nodes_with_bmc(ids)
    to_queue: dict = {AgentAction.GPU_RESET: [], AgentAction.REBOOT: []}
    to_cycle: list = []
    done: dict = {AgentAction.GPU_RESET: [], AgentAction.REBOOT: []}
    failed, why = [], {}
    for node in nodes:
        since = state_entered_at(node)
        mine = [a for a in actions.get(node.pk, []) if since is None or a[2] >= since]
        if not mine:
            kind = AgentAction.GPU_RESET if worst.get(node.pk) == S.RESET else AgentAction.REBOOT
            (to_cycle if kind == AgentAction.REBOOT and node.pk in out_of_band else to_queue[kind]).append(node)
            continue
        action, state = mine[-1][0], mine[-1][1]
        if state == AgentActionState.SUCCEEDED:
            done[action].append(node)
        elif state == AgentActionState.FAILED:
            failed.append(node)
            if len(mine[-1]) > 3 and mine[-1][3]:
                why[node.pk] = f"BMC power cycle failed: {mine[-1][3]}"
    if to_cycle:
        request_power_actions(
            nodes=to_cycle, action=PowerAction.POWER_CYCLE, actor=ACTOR, reason="health policy remediation"
        )
        record_step(
            node_ids=[n.pk for n in to_cycle],
            step=IncidentStep.DIAGNOSE,
            actor=ACTOR,
            now=now,
            state=IncidentState.DIAGNOSED,
            detail="remediation queued: power cycle through the BMC (out of band)",
        )
    for kind, group in to_queue.items():
        if group:
            request_agent_actions(nodes=group, action=kind, actor=ACTOR, reason="health policy remediation")
            record_step(
                node_ids=[n.pk for n in group],
                step=IncidentStep.DIAGNOSE,
                actor=ACTOR,
                now=now,
                state=IncidentState.DIAGNOSED,
                detail=f"remediation queued: {kind}",
            )
    validating = 0
    for kind, group in done.items():
        changes = transition_many(
            group, Lifecycle.VALIDATING, actor=ACTOR, action="health_validate", reason=f"{kind} succeeded; validating"
        )
        moved = [n for n in group if n.pk in {c.node_id for c in changes}]
        if not moved:
            continue
        validating += len(moved)
        checks = GATE_AFTER_RESET if kind == AgentAction.GPU_RESET else GATE_AFTER_REBOOT
        request_agent_actions(
            nodes=moved, action=checks[0], actor=ACTOR, params={"checks": list(checks)}, reason="validation gate"
        )
        record_step(
            node_ids=[n.pk for n in moved],
            step=IncidentStep.REPAIR,
            actor=ACTOR,
            now=now,
            detail=f"{kind} succeeded; validating with {', '.join(checks)}",
        )
    changes = []
    for reason in sorted({why.get(n.pk, "remediation failed") for n in failed}):
        changes += transition_many(
            [n for n in failed if why.get(n.pk, "remediation failed") == reason],
            Lifecycle.TRIAGE,
            actor=ACTOR,
            action="health_remediation_failed",
            reason=reason,
            last_error=reason[:2000],
        )
    if changes:
        record_step(
            node_ids=[c.node_id for c in changes],
            step=IncidentStep.DIAGNOSE,
            actor=ACTOR,
            now=now,
            state=IncidentState.DIAGNOSED,
            detail="remediation failed: sent to triage",
        )
    return {
        "queued": sum(len(g) for g in to_queue.values()),
        "validating": validating,
        "bmc_power_cycles": len(to_cycle),
    }
