"""Sweep steps beyond one signal → one severity: sustained thermal slowdown, diagnostics queued
for the next idle moment, and the NVLink domain of rack-scale systems held as one unit.

Each step is level-triggered (it looks at conditions and lifecycle now and moves only what is
not yet where the policy wants it) and costs a fixed number of batched queries.
"""

import logging
from datetime import datetime

from django.db import transaction
from django.db.models import Exists, OuterRef

from core.bulk import update_rows
from fleet.choices import AgentActionState, Attribution, Lifecycle
from fleet.models import Node, NodeAgentAction
from fleet.services.agent_work import request_agent_actions
from fleet.services.lifecycle import record_node_event
from health.choices import HELD, CheckStatus, ConditionStatus, IncidentStep
from health.choices import Severity as S
from health.models import Condition, HealthCheckResult, Incident, IncidentEvent
from health.policy import (
    DEFER_CORDON,
    DOMAIN_SIGNALS,
    HOLD_CORDON,
    IDLE_DIAGNOSTIC_SIGNALS,
    REPEAT_DIAGNOSTIC_SIGNALS,
    THERMAL_WINDOW,
)
from health.services.conditions import apply_observations
from health.services.incidents import NodeNodes, open_incidents_by_node, open_policy_incidents, record_step
from tenants.models import AllocationNode
from tenants.services.allocation_loop import replace_node

logger = logging.getLogger(__name__)

IDLE_DIAG_CORDON = "diagnostics at idle"
DOMAIN_HOLD = "NVLink domain held"
# A tray in one of these states was pulled by the health path; its domain stays held meanwhile.
PULLED_STATES = (
    Lifecycle.QUARANTINED,
    Lifecycle.DRAINING,
    Lifecycle.REMEDIATING,
    Lifecycle.VALIDATING,
    Lifecycle.TRIAGE,
    Lifecycle.REPAIR,
    Lifecycle.RMA,
)


def escalate_thermal(now: datetime) -> int:
    """thermal_slowdown active for the whole window → thermal_throttle (warn); it clears when
    the slowdown does. Returns how many were raised."""
    sustained: dict = {}
    for node_id, gpu, first_seen in Condition.objects.filter(
        signal="thermal_slowdown", status=ConditionStatus.ACTIVE
    ).values_list("node_id", "gpu_index", "first_seen"):
        if first_seen <= now - THERMAL_WINDOW:
            minutes = int((now - first_seen).total_seconds() // 60)
            sustained.setdefault(node_id, {})[(gpu, "thermal_throttle")] = f"thermal slowdown for {minutes} min"
    throttled = set(
        Condition.objects.filter(signal="thermal_throttle", status=ConditionStatus.ACTIVE).values_list(
            "node_id", flat=True
        )
    )
    nodes = set(sustained) | throttled
    if not nodes:
        return 0
    return apply_observations(
        observed=sustained,
        now=now,
        clear_absent={n: frozenset({"thermal_throttle"}) for n in nodes},
        load_signals=["thermal_throttle"],
    )


def queue_idle_diagnostics(now: datetime, actor: str) -> dict:
    """A signal that asks for a long diagnostic (XID 92 → DCGM level 4) gets it when the node is
    next idle: available with no tenant. The node is cordoned while it runs; a pass clears the
    signal and the cordon, a fail raises the diagnostic's own (fatal) condition."""
    live = AllocationNode.objects.filter(node=OuterRef("node_id"), ended_at__isnull=True)
    wanted = list(
        Condition.objects.filter(
            signal__in=list(IDLE_DIAGNOSTIC_SIGNALS), status=ConditionStatus.ACTIVE, node__lifecycle=Lifecycle.AVAILABLE
        )
        .exclude(Exists(live))
        .values_list("node_id", "signal", "first_seen")
    )
    queued = passed = 0
    for signal, check in IDLE_DIAGNOSTIC_SIGNALS.items():
        since = {n: at for n, s, at in wanted if s == signal}
        if not since:
            continue
        asked = {}
        for node_id, created in (
            NodeAgentAction.objects.filter(node_id__in=list(since), action=check)
            .exclude(state=AgentActionState.CANCELLED)
            .values_list("node_id", "created_at")
        ):
            if created >= since[node_id]:
                asked[node_id] = min(created, asked.get(node_id, created))
        todo = [n for n in since if n not in asked]
        if todo:
            nodes = list(Node.objects.filter(pk__in=todo, lifecycle=Lifecycle.AVAILABLE))
            queued += request_agent_actions(
                nodes=nodes, action=check, actor=actor, reason=f"{signal}: {check} at next idle (health policy)"
            )
            Node.objects.filter(pk__in=[n.pk for n in nodes], cordoned=False).update(
                cordoned=True,
                cordon_reason=f"{IDLE_DIAG_CORDON}: {check} for {signal}",
                attribution=Attribution.PROVIDER,
            )
            for node in nodes:
                record_node_event(
                    node,
                    actor=actor,
                    action="health_idle_diagnostic",
                    reason=f"{signal}: {check} queued at idle; cordoned while it runs",
                )
        passes = HealthCheckResult.objects.filter(
            node_id__in=list(asked), name=check, status=CheckStatus.PASS
        ).values_list("node_id", "observed_at")
        done = sorted({n for n, at in passes if at >= asked[n]}, key=str)
        if done:
            cleared = [signal, *(REPEAT_DIAGNOSTIC_SIGNALS if signal == "app_xid_repeat" else ())]
            Condition.objects.filter(node_id__in=done, signal__in=cleared, status=ConditionStatus.ACTIVE).update(
                status=ConditionStatus.CLEARED, last_seen=now
            )
            Node.objects.filter(pk__in=done, cordon_reason__startswith=IDLE_DIAG_CORDON).update(
                cordoned=False, cordon_reason="", attribution=""
            )
            passed += len(done)
    return {"idle_diagnostics_queued": queued, "idle_diagnostics_passed": passed}


def _domain_key(node) -> tuple:
    return (node.rack_id, node.node_type_id)


@transaction.atomic
def hold_nvlink_domains(now: datetime, actor: str) -> dict:
    """On rack-scale systems (NVL72) the NVLink domain is the unit: a tray pulled for a GPU or
    NVLink signal holds every other tray of its rack (cordoned, on the same incident, tenants
    moved off as a unit); the hold is released when no tray of the domain is pulled any more."""
    pulled = list(
        Node.objects.filter(node_type__rack_kw__isnull=False, lifecycle__in=PULLED_STATES)
        .filter(
            Exists(
                Condition.objects.filter(
                    node=OuterRef("pk"), status=ConditionStatus.ACTIVE, signal__in=list(DOMAIN_SIGNALS)
                )
            )
        )
        .only("id", "hostname", "rack_id", "node_type_id")
    )
    faulty = {}
    for node in pulled:
        faulty.setdefault(_domain_key(node), node)
    held_now = list(
        Node.objects.filter(node_type__rack_kw__isnull=False, cordon_reason__startswith=DOMAIN_HOLD).only(
            "id", "hostname", "rack_id", "node_type_id", "lifecycle"
        )
    )
    release = [n for n in held_now if _domain_key(n) not in faulty and n.lifecycle not in PULLED_STATES]
    if release:
        Node.objects.filter(pk__in=[n.pk for n in release]).update(cordoned=False, cordon_reason="", attribution="")
        for node in release:
            record_node_event(
                node,
                actor=actor,
                action="health_domain_release",
                reason="NVLink domain released: no tray of the domain is pulled any more",
            )
    if not faulty:
        return {"domains_held": 0, "trays_held": 0, "domains_released": len({_domain_key(n) for n in release})}
    racks = {k[0] for k in faulty}
    peers = [
        n
        for n in Node.objects.filter(rack_id__in=racks, node_type__rack_kw__isnull=False)
        .exclude(lifecycle__in=(*PULLED_STATES, Lifecycle.RETIRED, Lifecycle.DISPOSED))
        .select_related("node_type")
        if _domain_key(n) in faulty and not (n.cordoned and n.cordon_reason.startswith(DOMAIN_HOLD))
    ]
    incidents = open_incidents_by_node([n.pk for n in faulty.values()])
    links = []
    for node in peers:
        cause = faulty[_domain_key(node)]
        node.cordoned, node.attribution = True, Attribution.PROVIDER
        node.cordon_reason = f"{DOMAIN_HOLD}: {cause.hostname} pulled for a GPU/NVLink fault"[:200]
        record_node_event(node, actor=actor, action="health_domain_hold", reason=node.cordon_reason)
        if incidents.get(cause.pk):
            links.append(NodeNodes(incident_id=incidents[cause.pk], node_id=node.pk))
    NodeNodes.objects.bulk_create(links, ignore_conflicts=True)
    update_rows(Node, peers, ["cordoned", "cordon_reason", "attribution"], using="default")
    for cause in faulty.values():
        held = [n.hostname for n in peers if _domain_key(n) == _domain_key(cause)]
        if held:
            record_step(
                node_ids=[cause.pk],
                step=IncidentStep.STABILISE,
                actor=actor,
                now=now,
                detail=f"NVLink domain of rack {cause.rack_id} held: {len(held)} more tray(s) cordoned",
            )
    moved = _move_tenants_off(peers, actor)
    Incident.objects.filter(pk__in=set(incidents.values())).update(updated_at=now)
    return {
        "domains_held": len(faulty),
        "trays_held": len(peers),
        "tenant_trays_moved": moved,
        "domains_released": len({_domain_key(n) for n in release}),
    }


def _move_tenants_off(trays: list[Node], actor: str) -> int:
    """Replace every held tray a live allocation uses, so the allocation leaves the domain whole
    (the replacements come from other domains: every tray of this one is cordoned)."""
    moved = 0
    for membership in AllocationNode.objects.filter(node__in=trays, ended_at__isnull=True).select_related(
        "allocation", "node"
    ):
        try:
            with transaction.atomic():
                replace_node(
                    allocation=membership.allocation,
                    node=membership.node,
                    actor=actor,
                    reason=f"{DOMAIN_HOLD}: the allocation leaves the domain as a unit",
                )
            moved += 1
        except Exception:  # the hold must stand even when placing a replacement fails
            logger.exception(
                "moving allocation %s off held tray %s failed", membership.allocation_id, membership.node_id
            )
    return moved


@transaction.atomic
def hold_for_operator(now: datetime, actor: str) -> dict:
    """Nodes whose worst active signal asks for a person (hold) or a reset when convenient
    (defer) keep their tenant and take no new work: cordoned, named by the signal. A hold also
    opens an operator task (a policy incident) naming the Xid, the GPU and the catalogue's words;
    closing it (health.services.incidents.update_postmortem, audited) clears the hold. A deferred
    reset is pulled by the policy (as a GPU reset) once no tenant holds the node."""
    rows = list(
        Condition.objects.filter(
            status=ConditionStatus.ACTIVE,
            severity__in=HELD,
            node__lifecycle__in=(Lifecycle.AVAILABLE, Lifecycle.ACTIVE, Lifecycle.PROVISIONING),
        ).values_list("node_id", "gpu_index", "signal", "severity", "detail")
    )
    by_node: dict = {}
    for node_id, gpu, signal, severity, detail in rows:
        by_node.setdefault(node_id, []).append((gpu, signal, severity, detail))
    if not by_node:
        return {"held_for_operator": 0, "deferred_resets": 0}
    nodes = list(
        Node.objects.filter(pk__in=list(by_node)).only("id", "hostname", "cordoned", "cordon_reason", "lifecycle")
    )
    cordon, holds = [], []
    for node in nodes:
        conds = by_node[node.pk]
        held = [c for c in conds if c[2] == S.HOLD]
        kind = HOLD_CORDON if held else DEFER_CORDON
        signals = sorted({c[1] for c in (held or conds)})
        if held:
            holds.append((node, held))
        if not node.cordoned:
            node.cordoned, node.attribution = True, Attribution.PROVIDER
            node.cordon_reason = f"{kind}: {', '.join(signals)}"[:200]
            cordon.append(node)
        elif held and node.cordon_reason.startswith(DEFER_CORDON):
            node.cordon_reason = f"{kind}: {', '.join(signals)}"[:200]  # a hold outranks a deferred reset
            cordon.append(node)
    if cordon:
        update_rows(Node, cordon, ["cordoned", "cordon_reason", "attribution"], using="default")
        for node in cordon:
            record_node_event(
                node, actor=actor, action="health_hold", reason=f"{node.cordon_reason}; the tenant keeps the node"
            )
    opened = open_policy_incidents(
        nodes=[n for n, _ in holds],
        severity=S.HOLD,
        signals_by_node={n.pk: sorted({c[1] for c in held}) for n, held in holds},
        now=now,
        actor=actor,
    )
    for node_id, incident in opened.items():
        held = next(h for n, h in holds if n.pk == node_id)
        IncidentEvent.objects.bulk_create(
            [
                IncidentEvent(
                    incident=incident,
                    at=now,
                    step=IncidentStep.PAGE,
                    actor=actor,
                    detail=f"operator decision needed: {detail}"[:300],
                )
                for _, _, _, detail in held
            ]
        )
    return {"held_for_operator": len(holds), "deferred_resets": len(by_node) - len(holds)}


def escalate_app_xid_repeats(now: datetime) -> int:
    """An application Xid whose catalogue workflow investigates repeats (13, 31) seen again on
    the same GPU → app_xid_repeat (warn): diagnostics at the next idle window."""
    repeating: dict = {}
    for node_id, gpu, signal, count in Condition.objects.filter(
        signal__in=list(REPEAT_DIAGNOSTIC_SIGNALS), status=ConditionStatus.ACTIVE, count__gte=2
    ).values_list("node_id", "gpu_index", "signal", "count"):
        repeating.setdefault(node_id, {})[(gpu, "app_xid_repeat")] = f"{signal} {count} times on GPU {gpu}"
    if not repeating:
        return 0
    return apply_observations(observed=repeating, now=now, load_signals=["app_xid_repeat"])
