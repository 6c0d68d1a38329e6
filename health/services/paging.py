"""Operator paging: one page per incident, through the notification outbox (docs/notifications.md).

An incident of severity `warn` or worse is paged once (`page_incident`: the PAGE step on its
timeline and a `incident.trigger` event, dedup key `hangar-incident-<id>`, in the transaction
that pages it); the primary channels whose minimum severity it reaches receive it. A page
nobody acknowledges within an escalation channel's `escalate_after_minutes` is sent to that
channel too (`incident.escalate`). Acknowledging (in the console, the API or PagerDuty) sends
`incident.acknowledge`; resolving, or the incident closing, sends `incident.resolve`, to every
channel that was paged for it (but the tool it came from: `origin="pagerduty"` is not echoed back
to PagerDuty, health.services.pagerduty_inbound). `page_incidents` is the level-triggered loop that does all of
this for incidents opened or closed by any path (every 30 s), so no path can forget to page.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from core.errors import Conflict
from core.locks import advisory_lock
from core.metrics import PAGES
from core.outbox import emit
from core.services.audit import record_audit
from health.choices import SEVERITY_RANK, IncidentState, IncidentStep, PagingTier, Severity
from health.models import Incident, IncidentEvent, PagingChannel

OPERATORS = "operators"
OPEN_STATES = (IncidentState.OPEN, IncidentState.STABILISED, IncidentState.DIAGNOSED, IncidentState.REPAIRED)
PAGED_SEVERITIES = tuple(s for s in Severity.values if SEVERITY_RANK[s] >= SEVERITY_RANK[Severity.WARN])
# An incident opened before this long ago and never paged (paging was off, or it predates this
# feature) is not paged out of the blue when paging is switched on.
PAGE_BACKLOG = timedelta(hours=24)
NODES_LISTED = 50


class PageStateRefused(Conflict):
    code = "page_state"


def dedup_key(incident: Incident) -> str:
    """The one key of an incident's page in every tool (PagerDuty's dedup_key, e-mail, webhook)."""
    return f"hangar-incident-{incident.pk}"


def incident_payload(incident: Incident) -> dict:
    hostnames = list(incident.nodes.order_by("hostname").values_list("hostname", flat=True)[: NODES_LISTED + 1])
    tenants = sorted(set(incident.impacts.filter(end__isnull=True).values_list("tenant__slug", flat=True)))
    return {
        "incident": str(incident.pk),
        "title": incident.title,
        "severity": incident.severity,
        "state": incident.state,
        "scope": incident.scope,
        "scope_key": incident.scope_key,
        "likely_cause": incident.likely_cause,
        "opened_at": incident.opened_at.isoformat(),
        "nodes": hostnames[:NODES_LISTED],
        "nodes_total": incident.nodes.count(),
        "tenants_affected": tenants,
        "url": f"{settings.PUBLIC_URL.rstrip('/')}/health/incidents/{incident.pk}/",
        "dedup_key": dedup_key(incident),
    }


def _emit(incident: Incident, action: str, *, now: datetime, key_suffix: str = "", extra: dict | None = None) -> None:
    emit(
        topic=f"incident.{action}",
        dedup_key=f"{dedup_key(incident)}:{action}{key_suffix}",
        payload={**incident_payload(incident), "action": action, **(extra or {})},
        audience=OPERATORS,
        subject=f"incident:{incident.pk}",
        now=now,
    )


@transaction.atomic
def page_incident(incident: Incident, *, now: datetime, actor: str) -> bool:
    """Page on-call for `incident` once; False when it was paged before or is too mild to page."""
    if incident.severity not in PAGED_SEVERITIES:
        return False
    if not Incident.objects.filter(pk=incident.pk, paged_at__isnull=True).update(paged_at=now):
        return False
    incident.paged_at = now
    IncidentEvent.objects.create(
        incident=incident, at=now, step=IncidentStep.PAGE, actor=actor, detail=f"paged on-call: {incident.title}"
    )
    PAGES.labels(scope=incident.scope).inc()
    _emit(incident, "trigger", now=now)
    return True


@transaction.atomic
def acknowledge_page(
    incident: Incident, *, actor: str, now: datetime | None = None, via: str = "Hangar", origin: str = ""
) -> Incident:
    """On-call has it: stops the escalation; the paging tools are told (acknowledge)."""
    now = now or timezone.now()
    incident = Incident.objects.select_for_update().get(pk=incident.pk)
    if incident.paged_at is None:
        raise PageStateRefused("This incident was not paged; there is nothing to acknowledge.")
    if incident.page_resolved_at is not None:
        raise PageStateRefused("This page is resolved already.")
    if incident.page_acknowledged_at is not None:
        return incident
    incident.page_acknowledged_at, incident.page_acknowledged_by = now, actor
    incident.save(update_fields=["page_acknowledged_at", "page_acknowledged_by", "updated_at"])
    IncidentEvent.objects.create(
        incident=incident, at=now, step=IncidentStep.NOTE, actor=actor, detail=f"page acknowledged in {via}"
    )
    record_audit(actor=actor, action="incident.acknowledge", target=incident, after={"via": via})
    _emit(incident, "acknowledge", now=now, extra={"acknowledged_by": actor, "origin": origin})
    return incident


@transaction.atomic
def resolve_page(
    incident: Incident, *, actor: str, now: datetime | None = None, via: str = "Hangar", origin: str = ""
) -> Incident:
    """The page is over (the incident closed, or on-call resolved it): the paging tools are told."""
    now = now or timezone.now()
    incident = Incident.objects.select_for_update().get(pk=incident.pk)
    if incident.paged_at is None:
        raise PageStateRefused("This incident was not paged; there is nothing to resolve.")
    if incident.page_resolved_at is not None:
        return incident
    incident.page_resolved_at = now
    incident.save(update_fields=["page_resolved_at", "updated_at"])
    IncidentEvent.objects.create(
        incident=incident, at=now, step=IncidentStep.NOTE, actor=actor, detail=f"page resolved in {via}"
    )
    record_audit(actor=actor, action="incident.resolve_page", target=incident, after={"via": via})
    _emit(incident, "resolve", now=now, extra={"origin": origin})
    return incident


def page_incidents(now: datetime | None = None) -> dict:
    """The paging loop: page the unpaged, escalate the unacknowledged, resolve the closed. One
    worker at a time (its advisory lock): two workers would page the same incident twice."""
    with transaction.atomic(), advisory_lock("page_incidents") as held:
        if not held:
            return {"skipped": True}
        return _page_incidents(now or timezone.now())


def _page_incidents(now: datetime) -> dict:
    actor = "system:paging"
    paged = escalated = resolved = 0
    for incident in Incident.objects.filter(
        paged_at__isnull=True, state__in=OPEN_STATES, severity__in=PAGED_SEVERITIES, opened_at__gte=now - PAGE_BACKLOG
    ).order_by("opened_at")[:200]:
        paged += page_incident(incident, now=now, actor=actor)
    for incident in Incident.objects.filter(
        paged_at__isnull=False, page_resolved_at__isnull=True, state=IncidentState.CLOSED
    ).order_by("closed_at")[:200]:
        resolve_page(incident, actor=actor, now=now, via="Hangar (the incident closed)")
        resolved += 1
    waiting = Incident.objects.filter(
        paged_at__isnull=False, page_acknowledged_at__isnull=True, page_resolved_at__isnull=True
    )
    for channel in PagingChannel.objects.filter(enabled=True, tier=PagingTier.ESCALATION):
        severities = [s for s in PAGED_SEVERITIES if SEVERITY_RANK[s] >= SEVERITY_RANK[channel.min_severity]]
        overdue = waiting.filter(
            severity__in=severities, paged_at__lte=now - timedelta(minutes=channel.escalate_after_minutes)
        ).order_by("paged_at")[:200]
        for incident in overdue:
            escalated += _escalate(incident, channel, now=now)
    return {"paged": paged, "escalated": escalated, "resolved": resolved}


@transaction.atomic
def _escalate(incident: Incident, channel: PagingChannel, *, now: datetime) -> int:
    before = incident.page_escalated_at
    Incident.objects.filter(Q(pk=incident.pk) & Q(page_escalated_at__isnull=True)).update(page_escalated_at=now)
    minutes = channel.escalate_after_minutes
    _emit(incident, "escalate", now=now, key_suffix=f":{channel.pk}", extra={"channel": str(channel.pk)})
    if before is None:
        IncidentEvent.objects.create(
            incident=incident,
            at=now,
            step=IncidentStep.PAGE,
            actor="system:paging",
            detail=f"page unacknowledged for {minutes} min: escalated to {channel.name}",
        )
    return 1


def send_test_page(channel: PagingChannel, *, actor: str, now: datetime | None = None) -> None:
    """A test message to one channel (the admin's "send test" action), through the outbox."""
    now = now or timezone.now()
    with transaction.atomic():
        emit(
            topic="paging.test",
            dedup_key=f"paging-test:{channel.pk}:{now.isoformat()}",
            payload={
                "title": f"Test page from Hangar to {channel.name}",
                "severity": "info",
                "channel": str(channel.pk),
                "dedup_key": f"hangar-test-{channel.pk}",
                "url": settings.PUBLIC_URL,
                "requested_by": actor,
            },
            audience=OPERATORS,
            subject=f"paging-channel:{channel.pk}",
            now=now,
        )
        record_audit(actor=actor, action="paging_channel.test", target=channel)
