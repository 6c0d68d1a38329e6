"""Incidents: opened by the policy (one per pulled node) or by an operator; a timeline of
detect, stabilise, diagnose, repair, return; SLA credits for provider-attributed time."""

import logging
from datetime import datetime
from decimal import Decimal

from django.db import transaction

from billing.services.credits import record_sla_credit
from core import clock
from core.search import index_objects
from core.services.audit import record_audit
from fleet.choices import Attribution, Lifecycle
from fleet.models import Node, NodeEvent
from health.choices import ConditionStatus, IncidentOpener, IncidentState, IncidentStep, Severity
from health.models import Condition, Incident, IncidentEvent, IncidentImpact
from health.policy import HOLD_CORDON
from health.services.paging import page_incident
from tenants.choices import AllocationNodeRole
from tenants.models import AllocationNode

logger = logging.getLogger(__name__)

OPEN_STATES = (IncidentState.OPEN, IncidentState.STABILISED, IncidentState.DIAGNOSED, IncidentState.REPAIRED)
NodeNodes = Incident.nodes.through


class IncidentNotClosable(Exception):
    pass


def open_incidents_by_node(node_ids) -> dict:
    """{node_id: incident_id} for the nodes' open incidents (one query)."""
    rows = NodeNodes.objects.filter(node_id__in=list(node_ids), incident__state__in=OPEN_STATES)
    return dict(rows.values_list("node_id", "incident_id"))


@transaction.atomic
def open_policy_incidents(
    *,
    nodes: list[Node],
    severity: str,
    signals_by_node: dict,
    now: datetime,
    actor: str,
    attribution_of: dict | None = None,
) -> dict:
    """One incident per node that has none open. Returns {node_id: incident}. `attribution_of`:
    node id → attribution where it is not the provider's (a fault only the node reported)."""
    already = open_incidents_by_node([n.pk for n in nodes])
    if severity != Severity.HOLD:
        # An operator task (hold) open on a node the policy now pulls becomes the pull's incident:
        # closing it must then wait for the gate like any other.
        upgraded = Incident.objects.filter(pk__in=set(already.values()), severity=Severity.HOLD)
        for incident_id in upgraded.values_list("pk", flat=True):
            IncidentEvent.objects.create(
                incident_id=incident_id,
                at=now,
                step=IncidentStep.DETECT,
                actor=actor,
                detail=f"health policy ({severity}): the node is pulled; the operator task is now this incident",
            )
        upgraded.update(severity=severity, updated_at=now)
    created: dict = {}
    for node in nodes:
        if node.pk in already:
            continue
        signals = sorted(signals_by_node.get(node.pk, []))
        created[node.pk] = Incident(
            title=f"{node.hostname}: {', '.join(signals)}",
            opened_by=IncidentOpener.POLICY,
            severity=severity,
            signals=signals,
            opened_at=now,
            attribution=(attribution_of or {}).get(node.pk, Attribution.PROVIDER),
        )
    Incident.objects.bulk_create(created.values())
    index_objects(created.values(), created=True)  # bulk_create sends no post_save
    NodeNodes.objects.bulk_create([NodeNodes(incident_id=inc.pk, node_id=node_id) for node_id, inc in created.items()])
    IncidentEvent.objects.bulk_create(
        [
            IncidentEvent(
                incident=inc,
                at=now,
                step=IncidentStep.DETECT,
                actor=actor,
                detail=f"health policy ({severity}): {', '.join(inc.signals)}"
                + (
                    "; reported only by the node's own agent while a tenant had root on it: the SLA credit waits "
                    "for out-of-band evidence or an operator's confirmation"
                    if inc.attribution == Attribution.UNCONFIRMED
                    else ""
                ),
            )
            for inc in created.values()
        ]
    )
    return created


@transaction.atomic
def record_step(*, node_ids, step: str, detail: str, actor: str, now: datetime, state: str | None = None) -> int:
    """Append `step` to the open incidents of these nodes (and move their state forward)."""
    by_node = open_incidents_by_node(node_ids)
    if not by_node:
        return 0
    IncidentEvent.objects.bulk_create(
        [IncidentEvent(incident_id=inc, at=now, step=step, actor=actor, detail=detail) for inc in set(by_node.values())]
    )
    if state:
        Incident.objects.filter(pk__in=set(by_node.values())).exclude(state=IncidentState.CLOSED).update(
            state=state, updated_at=now
        )
    return len(by_node)


def _gpus_back_at(impacts) -> dict:
    """impact id → when its allocation got a replacement node (the first placed at or after the
    pull), from tenancy's membership history (one query). The credit window ends there."""
    if not impacts:
        return {}
    placed = list(
        AllocationNode.objects.filter(
            allocation_id__in={i.allocation_id for i in impacts},
            role=AllocationNodeRole.REPLACEMENT,
            started_at__gte=min(i.start for i in impacts),
        )
        .order_by("started_at")
        .values_list("allocation_id", "started_at")
    )
    out = {}
    for impact in impacts:
        out[impact.pk] = next(
            (at for allocation_id, at in placed if allocation_id == impact.allocation_id and at >= impact.start), None
        )
    return out


def settle_credits(*, node_ids, end: datetime, actor: str) -> int:
    """Close the provider-attributed windows of these nodes' impacts and write SLA credits to
    the ledger (billing.services.credits, which applies the SLA policy). A window ends when
    the allocation had its GPUs back: at the replacement's placement if one was placed before
    `end` (the repair), else at `end`. Each impact is credited once."""
    impacts = list(IncidentImpact.objects.select_related("incident").filter(node_id__in=list(node_ids), credited=False))
    if not impacts:
        return 0
    back_at = _gpus_back_at(impacts)
    newly_closed = {i.pk for i in impacts if i.end is None}
    for impact in impacts:
        replaced = back_at.get(impact.pk)
        impact.end = impact.end or (min(replaced, end) if replaced else end)
    held = [i for i in impacts if i.incident.attribution == Attribution.UNCONFIRMED]
    if held:  # the window is closed and kept; the credit waits for evidence or an operator
        IncidentImpact.objects.bulk_update(held, ["end"])
        IncidentEvent.objects.bulk_create(
            [
                IncidentEvent(
                    incident_id=i.incident_id,
                    at=end,
                    step=IncidentStep.RETURN,
                    actor=actor,
                    detail=f"SLA window closed: {i.gpus} GPUs from {i.start:%Y-%m-%d %H:%M:%S} to {i.end:%Y-%m-%d %H:%M:%S} "
                    "UTC; no credit yet: only the node's own agent reported the fault while a tenant had root on it "
                    "(confirm with out-of-band evidence or as an operator)",
                )
                for i in held
                if i.pk in newly_closed
            ]
        )
    impacts = [i for i in impacts if i.incident.attribution != Attribution.UNCONFIRMED]
    if not impacts:
        return 0
    for impact in impacts:
        if impact.end > impact.start:
            record_sla_credit(
                tenant_id=impact.tenant_id,
                allocation_id=impact.allocation_id,
                node_id=impact.node_id,
                start=impact.start,
                end=impact.end,
                gpus=impact.gpus,
                attribution=impact.incident.attribution or Attribution.PROVIDER,
                reason="provider-attributed node outage (health policy)",
                incident_id=impact.incident_id,
            )
        impact.credited = True
    IncidentImpact.objects.bulk_update(impacts, ["end", "credited"])
    IncidentEvent.objects.bulk_create(
        [
            IncidentEvent(
                incident_id=i.incident_id,
                at=end,
                step=IncidentStep.RETURN,
                actor=actor,
                detail=f"SLA window closed: {i.gpus} GPUs from {i.start:%Y-%m-%d %H:%M:%S.%f} to "
                f"{i.end:%Y-%m-%d %H:%M:%S.%f} UTC, credited under the SLA policy",
            )
            for i in impacts
        ]
    )
    return len(impacts)


def impact_gpu_hours(incident: Incident, now: datetime) -> Decimal:
    seconds = sum(((i.end or now) - i.start).total_seconds() * i.gpus for i in incident.impacts.all())
    return (Decimal(seconds) / Decimal(3600)).quantize(Decimal("0.01"))


def _returned_through_gate(node_ids) -> bool:
    """Every node is in RMA, or is available and its last move into available came from validating."""
    nodes = dict(Node.objects.filter(pk__in=node_ids).values_list("pk", "lifecycle"))
    last_entry = {}
    for node_id, from_state in (
        NodeEvent.objects.filter(node_id__in=node_ids, to_state=Lifecycle.AVAILABLE)
        .exclude(from_state=Lifecycle.AVAILABLE)
        .order_by("at")
        .values_list("node_id", "from_state")
    ):
        last_entry[node_id] = from_state
    return all(
        state == Lifecycle.RMA
        or (state == Lifecycle.AVAILABLE and last_entry.get(node_id) in (Lifecycle.VALIDATING, Lifecycle.BURN_IN))
        for node_id, state in nodes.items()
    )


def record_impacts(*, incident_of: dict, memberships, now: datetime) -> list[IncidentImpact]:
    """One impact per live allocation membership of an incident's node: which tenant lost how
    many GPUs from when (the SLA credit's window starts there). `incident_of`: node id → incident
    id. Used by the sweep's pulls and by incidents an operator opens, so both name the tenants."""
    return IncidentImpact.objects.bulk_create(
        [
            IncidentImpact(
                incident_id=incident_of[m.node_id],
                node_id=m.node_id,
                allocation_id=m.allocation_id,
                tenant_id=m.allocation.tenant_id,
                gpus=m.node.node_type.gpus_per_node,
                start=now,
            )
            for m in memberships
            if m.node_id in incident_of
        ]
    )


@transaction.atomic
def open_operator_incident(*, nodes: list[Node], title: str, severity: str, actor: str) -> Incident:
    now = clock.now()
    incident = Incident.objects.create(title=title, opened_by=IncidentOpener.OPERATOR, severity=severity, opened_at=now)
    incident.nodes.set(nodes)
    memberships = AllocationNode.objects.filter(node__in=nodes, ended_at__isnull=True).select_related(
        "allocation", "node__node_type"
    )
    record_impacts(incident_of={n.pk: incident.pk for n in nodes}, memberships=memberships, now=now)
    IncidentEvent.objects.create(incident=incident, at=now, step=IncidentStep.DETECT, actor=actor, detail=title)
    record_audit(actor=actor, action="incident.open", target=incident, after={"title": title}, reason=title)
    page_incident(incident, now=now, actor=actor)
    return incident


def confirm_attribution(*, incident: Incident, actor: str, evidence: str, now: datetime | None = None) -> bool:
    """A node-reported (unconfirmed) incident confirmed as the provider's, by an operator or by
    out-of-band evidence: the SLA windows already closed are credited now, the open ones when the
    node returns. False when it was not unconfirmed (nothing changes)."""
    now = now or clock.now()
    with transaction.atomic():
        moved = Incident.objects.filter(pk=incident.pk, attribution=Attribution.UNCONFIRMED).update(
            attribution=Attribution.PROVIDER, updated_at=now
        )
        if not moved:
            return False
        incident.attribution = Attribution.PROVIDER
        IncidentEvent.objects.create(
            incident=incident,
            at=now,
            step=IncidentStep.DIAGNOSE,
            actor=actor,
            detail=f"attribution confirmed: {evidence}",
        )
        record_audit(
            actor=actor,
            action="incident.attribution_confirmed",
            target=incident,
            before={"attribution": Attribution.UNCONFIRMED},
            after={"attribution": Attribution.PROVIDER},
            reason=evidence,
        )
        closed = list(
            IncidentImpact.objects.filter(incident=incident, credited=False, end__isnull=False).values_list(
                "node_id", "end"
            )
        )
    for node_id, end in closed:
        settle_credits(node_ids=[node_id], end=end, actor=actor)
    return True


def confirm_from_node_evidence(*, node_id, identity_issued_at: datetime, evidence: str, now: datetime) -> int:
    """A fault reported by an identity the node received after the incident opened (its wipe
    rotated the tenant's away: DCGM on the wiped node) is out-of-band evidence for the node's
    unconfirmed incidents opened before it. Returns how many were confirmed."""
    incidents = Incident.objects.filter(
        nodes__pk=node_id, attribution=Attribution.UNCONFIRMED, opened_at__lt=identity_issued_at
    )
    return sum(
        confirm_attribution(
            incident=incident,
            actor="system:health",
            evidence=f"{evidence}, reported by the node's identity issued {identity_issued_at:%Y-%m-%d %H:%M:%S} UTC, "
            "after the tenant's access ended",
            now=now,
        )
        for incident in incidents
    )


@transaction.atomic
def release_hold(*, node_ids, now: datetime, actor: str) -> int:
    """An operator closed the hold's task: its hold conditions clear and the hold's cordon lifts
    (a deferred reset stays, and is cordoned for on the next sweep)."""
    cleared = Condition.objects.filter(
        node_id__in=node_ids, status=ConditionStatus.ACTIVE, severity=Severity.HOLD
    ).update(status=ConditionStatus.CLEARED, last_seen=now)
    Node.objects.filter(pk__in=node_ids, cordon_reason__startswith=HOLD_CORDON).update(
        cordoned=False, cordon_reason="", attribution=""
    )
    return cleared


@transaction.atomic
def update_postmortem(*, incident: Incident, actor: str, cause: str, attribution: str, close: bool = False) -> Incident:
    """Save the postmortem; `close` only when every node is back through the gate or in RMA.
    An operator setting a node-reported (unconfirmed) incident to the provider confirms it."""
    if incident.attribution == Attribution.UNCONFIRMED and attribution == Attribution.PROVIDER:
        confirm_attribution(incident=incident, actor=actor, evidence=f"confirmed by {actor}")
    incident = Incident.objects.select_for_update().get(pk=incident.pk)
    before = {"cause": incident.cause, "attribution": incident.attribution, "state": incident.state}
    now = clock.now()
    node_ids = list(incident.nodes.values_list("pk", flat=True))
    if close:
        if incident.state == IncidentState.CLOSED:
            raise IncidentNotClosable("The incident is already closed.")
        if incident.severity == Severity.HOLD:
            # An operator task: closing it is the decision. The hold lifts; what else the node
            # needs (a pull, a deferred reset) the policy does on its next sweep.
            release_hold(node_ids=node_ids, now=now, actor=actor)
        elif not _returned_through_gate(node_ids):
            raise IncidentNotClosable("Close it once every node has passed validation (available) or is in RMA.")
    # The attribution first: settling reads it to decide what the SLA policy credits.
    incident.cause = cause
    incident.attribution = attribution
    incident.save(update_fields=["cause", "attribution"])
    if close:
        settle_credits(node_ids=node_ids, end=now, actor=actor)
    incident.impact_gpu_hours = impact_gpu_hours(incident, now)
    if close:
        incident.state = IncidentState.CLOSED
        incident.closed_at = now
    incident.save()
    IncidentEvent.objects.create(
        incident=incident,
        at=now,
        step=IncidentStep.CLOSE if close else IncidentStep.NOTE,
        actor=actor,
        detail=f"postmortem: {cause}" if cause else "postmortem updated",
    )
    record_audit(
        actor=actor,
        action="incident.close" if close else "incident.postmortem",
        target=incident,
        before=before,
        after={"cause": cause, "attribution": attribution, "state": incident.state},
        reason=cause,
    )
    return incident
