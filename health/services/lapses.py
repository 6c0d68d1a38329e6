"""Correlated lapses: one incident for one cause when many nodes go silent together.

When nodes behind one leaf switch, in one rack (its PDU or top-of-rack switch) or across a
large share of a site stop sending heartbeats within a short window, the cause is shared,
not sixteen node faults. The sweep then opens ONE incident for the group naming the likely
cause, holds its nodes (they read `unknown`; the lease never judges them lost, so nothing is
quarantined, evicted, power-cycled or sent for RMA), pages once, and closes the incident
when the nodes are back. The same mechanism covers the control plane itself being away: a
sweep that finds its previous pass far in the past records one control-plane incident and
re-arms every lease from the moment it resumed (core.services.loop_clock).

Judged every pass, level-triggered, in a fixed number of queries: nothing is fetched per
node when no node is silent.
"""

import logging
import uuid
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Count, Exists, OuterRef, Q

from fleet.choices import Attribution, Lifecycle
from fleet.models import FabricDomain, Node, Rack, Site
from health.choices import IncidentOpener, IncidentScope, IncidentState, IncidentStep
from health.choices import Severity as S
from health.models import Incident, IncidentEvent, LapseHold
from health.policy import (
    GROUP_LAPSE_MIN_NODES,
    GROUP_LAPSE_SHARE,
    HEARTBEAT_LOST_AFTER,
    HEARTBEAT_UNKNOWN_AFTER,
    LAPSE_WINDOW,
    SITE_LAPSE_MIN_NODES,
    SITE_LAPSE_SHARE,
    group_lapse_min_nodes,
)
from health.services.paging import page_incident

logger = logging.getLogger(__name__)

LEASE_LIFECYCLES = (Lifecycle.AVAILABLE, Lifecycle.ACTIVE, Lifecycle.PROVISIONING)
OPEN_STATES = (IncidentState.OPEN, IncidentState.STABILISED, IncidentState.DIAGNOSED, IncidentState.REPAIRED)
CONTROL_PLANE_KEY = "control-plane"
NodeNodes = Incident.nodes.through

LIKELY_CAUSE = {
    IncidentScope.SITE: "the site network or the control plane's API lost the fleet (most nodes went silent at once)",
    IncidentScope.LEAF: "leaf switch {key} (its nodes went silent together; check the switch and its uplinks)",
    IncidentScope.RACK: "rack {key}: its PDU / power feed or its top-of-rack switch",
    IncidentScope.CONTROL_PLANE: "the control plane itself was down (no health sweep ran); node silences in that "
    "time are not node faults",
}


@dataclass(frozen=True)
class Silent:
    node_id: object
    since: datetime  # last heartbeat, or the end of a control-plane outage if later
    site: str
    leaf: str | None
    rack: str


def page(incident: Incident, *, now: datetime, actor: str) -> None:
    """On-call hears once per incident (health.services.paging: the outbox's channels) and the log says so."""
    page_incident(incident, now=now, actor=actor)
    logger.warning("PAGE %s: %s (likely cause: %s)", incident.scope, incident.title, incident.likely_cause)


def _open_incident(*, scope: str, key: str, label: str, title: str, now: datetime, actor: str) -> Incident:
    incident = Incident.objects.create(
        title=title[:200],
        opened_by=IncidentOpener.POLICY,
        severity=S.WARN,
        signals=["heartbeat_lapse"],
        opened_at=now,
        attribution=Attribution.PROVIDER,
        scope=scope,
        scope_key=key,
        likely_cause=LIKELY_CAUSE[scope].format(key=label)[:300],
        state=IncidentState.STABILISED,
    )
    IncidentEvent.objects.create(incident=incident, at=now, step=IncidentStep.DETECT, actor=actor, detail=title)
    return incident  # paged by the caller once its nodes are attached (the page lists them)


def note_control_plane_outage(*, outage, now: datetime, actor: str) -> Incident | None:
    """One incident for a control-plane outage the sweep just detected (none if one is open)."""
    if outage is None:
        return None
    if Incident.objects.filter(scope=IncidentScope.CONTROL_PLANE, state__in=OPEN_STATES).exists():
        return None
    seconds = int(outage.length.total_seconds())
    title = (
        f"Control plane away for {seconds} s: no health sweep from {outage.started:%H:%M:%S} to "
        f"{outage.ended:%H:%M:%S} UTC; leases re-armed, nothing judged for that time"
    )
    incident = _open_incident(
        scope=IncidentScope.CONTROL_PLANE, key=CONTROL_PLANE_KEY, label="", title=title, now=now, actor=actor
    )
    page(incident, now=now, actor=actor)
    IncidentEvent.objects.create(
        incident=incident,
        at=now,
        step=IncidentStep.STABILISE,
        actor=actor,
        detail=f"per-node heartbeat judgement resumes at "
        f"{now + HEARTBEAT_LOST_AFTER:%H:%M:%S} UTC, one full lease after the restart",
    )
    return incident


def _close_control_plane(*, resumed: datetime | None, now: datetime, actor: str) -> int:
    """The control-plane incident closes once a full lease has passed since the restart
    (every node had its chance to report); the lapse rules below judge whoever did not."""
    if resumed is None or now < resumed + HEARTBEAT_LOST_AFTER:
        return 0
    open_ = list(Incident.objects.filter(scope=IncidentScope.CONTROL_PLANE, state__in=OPEN_STATES))
    if not open_:
        return 0
    fresh = Node.objects.filter(lifecycle__in=LEASE_LIFECYCLES, last_heartbeat_at__gte=now - HEARTBEAT_UNKNOWN_AFTER)
    reporting = Node.objects.filter(lifecycle__in=LEASE_LIFECYCLES, last_heartbeat_at__isnull=False)
    detail = f"heartbeats flow again: {fresh.count()} of {reporting.count()} reporting nodes fresh"
    for incident in open_:
        close_incident(incident, now=now, actor=actor, detail=detail)
    return len(open_)


def close_incident(incident: Incident, *, now: datetime, actor: str, detail: str) -> None:
    IncidentEvent.objects.bulk_create(
        [
            IncidentEvent(incident=incident, at=now, step=IncidentStep.RETURN, actor=actor, detail=detail),
            IncidentEvent(
                incident=incident,
                at=now,
                step=IncidentStep.CLOSE,
                actor=actor,
                detail=f"closed by the health sweep; cause: {incident.likely_cause}",
            ),
        ]
    )
    Incident.objects.filter(pk=incident.pk).update(
        state=IncidentState.CLOSED, closed_at=now, updated_at=now, cause=incident.cause or incident.likely_cause
    )


def densest(silent: list, window: timedelta = LAPSE_WINDOW) -> list:
    """The largest subset (of anything with a `since`) that began within `window` of each other."""
    ordered = sorted(silent, key=lambda s: s.since)
    best: list = []
    start = 0
    for end in range(len(ordered)):
        while ordered[end].since - ordered[start].since > window:
            start += 1
        if end - start + 1 > len(best):
            best = ordered[start : end + 1]
    return best


def _silent_nodes(now: datetime, resumed: datetime | None) -> tuple[list[Silent], dict]:
    """Reporting nodes that are silent now (with the group keys), and the reporting counts per group."""
    reporting = Node.objects.filter(lifecycle__in=LEASE_LIFECYCLES, last_heartbeat_at__isnull=False)
    cutoff = now - HEARTBEAT_UNKNOWN_AFTER
    if resumed is not None and resumed > cutoff:
        return [], {}  # the control plane restarted less than one beat-window ago: nobody is silent yet
    if not reporting.filter(last_heartbeat_at__lt=cutoff).exists():
        return [], {}
    totals: dict = defaultdict(int)
    silent: list[Silent] = []
    for node_id, last, site, domain, leaf, rack in reporting.values_list(
        "pk", "last_heartbeat_at", "rack__hall__site_id", "fabric_domain_id", "leaf_switch", "rack_id"
    ):
        leaf_key = f"{domain}/{leaf}" if domain and leaf else None
        for group in ((IncidentScope.SITE, site), (IncidentScope.LEAF, leaf_key), (IncidentScope.RACK, rack)):
            if group[1] is not None:
                totals[group] += 1
        if last < cutoff:
            since = max(last, resumed) if resumed else last
            silent.append(Silent(node_id, since, str(site), leaf_key, str(rack)))
    return silent, totals


def _labels(scope: str, keys: set) -> dict:
    """Names people know for the group keys (one query per scope that has groups)."""
    if not keys:
        return {}
    if scope == IncidentScope.SITE:
        return {str(k): v for k, v in Site.objects.filter(pk__in=keys).values_list("pk", "slug")}
    if scope == IncidentScope.RACK:
        return {str(k): v for k, v in Rack.objects.filter(pk__in=keys).values_list("pk", "name")}
    domains = dict(FabricDomain.objects.filter(pk__in={k.split("/")[0] for k in keys}).values_list("pk", "name"))
    out = {}
    for key in keys:
        domain, leaf = key.split("/", 1)
        out[key] = f"{domains.get(uuid.UUID(domain), domain)}/{leaf}"
    return out


def judge_lapses(*, now: datetime, resumed: datetime | None, actor: str) -> dict:
    """Hold correlated silences, return nodes whose heartbeats flow again, close finished incidents."""
    summary = {"held": 0, "returned": 0, "released": 0, "lapse_incidents": 0, "closed": 0}
    summary["closed"] += _close_control_plane(resumed=resumed, now=now, actor=actor)
    silent, totals = _silent_nodes(now, resumed)
    silent_ids = {s.node_id for s in silent}
    open_holds = list(
        LapseHold.objects.filter(returned_at__isnull=True, released_at__isnull=True).select_related("incident")
    )
    held_ids = {h.node_id for h in open_holds}

    # Back: a held node that is no longer silent.
    back = [h for h in open_holds if h.node_id not in silent_ids]
    if back:
        LapseHold.objects.filter(pk__in=[h.pk for h in back]).update(returned_at=now)
        summary["returned"] = len(back)

    # New holds: site first (it explains everything under it), then leaf, then rack.
    unheld = [s for s in silent if s.node_id not in held_ids]
    new_holds: list[LapseHold] = []
    opened: list[Incident] = []
    for scope, min_nodes, share in (
        (IncidentScope.SITE, SITE_LAPSE_MIN_NODES, SITE_LAPSE_SHARE),
        (IncidentScope.LEAF, group_lapse_min_nodes, GROUP_LAPSE_SHARE),
        (IncidentScope.RACK, group_lapse_min_nodes, GROUP_LAPSE_SHARE),
    ):
        attr = {IncidentScope.SITE: "site", IncidentScope.LEAF: "leaf", IncidentScope.RACK: "rack"}[scope]
        groups: dict = defaultdict(list)
        for s in silent:
            if getattr(s, attr) is not None:
                groups[getattr(s, attr)].append(s)
        correlated = {}
        for key, members in groups.items():
            together = densest(members) if scope != IncidentScope.SITE else members
            size = totals[(scope, _raw(scope, key))]
            least = min_nodes(size) if callable(min_nodes) else min_nodes
            if len(together) >= least and len(together) >= share * size:
                correlated[key] = together
        existing = {
            i.scope_key: i
            for i in Incident.objects.filter(scope=scope, scope_key__in=list(correlated), state__in=OPEN_STATES)
        }
        labels = _labels(scope, set(correlated) - set(existing))
        taken = {h.node_id for h in new_holds}
        for key, together in correlated.items():
            # site-wide: hold every silent node there; leaf/rack: the ones that went silent together
            members = [
                s
                for s in (groups[key] if scope == IncidentScope.SITE else together)
                if s.node_id not in held_ids and s.node_id not in taken
            ]
            if not members:
                continue
            incident = existing.get(key)
            reporting = totals[(scope, _raw(scope, key))]
            detail = (
                f"{len(together)} of {reporting} reporting nodes silent within {int(LAPSE_WINDOW.total_seconds())} s"
                if scope != IncidentScope.SITE
                else f"{len(together)} of {reporting} reporting nodes silent"
            )
            if incident is None:
                label = labels.get(key, key)
                incident = _open_incident(
                    scope=scope,
                    key=key,
                    label=label,
                    now=now,
                    actor=actor,
                    title=f"{IncidentScope(scope).label} {label}: {detail}",
                )
                summary["lapse_incidents"] += 1
                opened.append(incident)
            else:
                IncidentEvent.objects.create(
                    incident=incident,
                    at=now,
                    step=IncidentStep.NOTE,
                    actor=actor,
                    detail=f"{len(members)} more node(s) silent; {detail}",
                )
            new_holds += [
                LapseHold(incident=incident, node_id=s.node_id, held_at=now, silent_since=s.since) for s in members
            ]
            taken.update(s.node_id for s in members)
        unheld = [s for s in unheld if s.node_id not in taken]
    if new_holds:
        LapseHold.objects.bulk_create(new_holds)
        NodeNodes.objects.bulk_create(
            [NodeNodes(incident_id=h.incident_id, node_id=h.node_id) for h in new_holds], ignore_conflicts=True
        )
        summary["held"] = len(new_holds)
    for incident in opened:
        page(incident, now=now, actor=actor)

    summary["released"] = _release_stragglers(open_holds, back, silent, totals, now=now, actor=actor)
    summary["closed"] += _close_finished(now=now, actor=actor)
    return summary


def _raw(scope: str, key: str):
    """The totals dict is keyed by the raw group values (UUIDs for site and rack)."""
    return uuid.UUID(key) if scope in (IncidentScope.SITE, IncidentScope.RACK) else key


def _release_stragglers(open_holds, back, silent, totals, *, now: datetime, actor: str) -> int:
    """Once most of an incident's nodes are back, the ones still silent are their own fault:
    hand them back to per-node judgement (the lease restarts from now)."""
    back_by_incident: dict = defaultdict(int)
    for h in back:
        back_by_incident[h.incident_id] += 1
    still: dict = defaultdict(list)
    back_ids = {h.pk for h in back}
    for h in open_holds:
        if h.pk not in back_ids:
            still[h.incident_id].append(h)
    release = []
    returned_before = dict(
        LapseHold.objects.filter(incident_id__in=list(still), returned_at__isnull=False)
        .values("incident_id")
        .annotate(n=Count("id"))
        .values_list("incident_id", "n")
    )
    for incident_id, holds in still.items():
        returned = returned_before.get(incident_id, 0)
        if returned and returned >= len(holds) and len(holds) < GROUP_LAPSE_MIN_NODES:
            release += holds
    if not release:
        return 0
    LapseHold.objects.filter(pk__in=[h.pk for h in release]).update(released_at=now)
    by_incident: dict = defaultdict(int)
    for h in release:
        by_incident[h.incident_id] += 1
    IncidentEvent.objects.bulk_create(
        [
            IncidentEvent(
                incident_id=i,
                at=now,
                step=IncidentStep.NOTE,
                actor=actor,
                detail=f"{n} node(s) still silent after the rest came back: judged on their own from now",
            )
            for i, n in by_incident.items()
        ]
    )
    return len(release)


def _close_finished(*, now: datetime, actor: str) -> int:
    """Lapse incidents whose holds have all ended close together, with one line of how."""
    holds = LapseHold.objects.filter(incident=OuterRef("pk"))
    done = list(
        Incident.objects.filter(
            scope__in=(IncidentScope.SITE, IncidentScope.LEAF, IncidentScope.RACK), state__in=OPEN_STATES
        )
        .filter(Exists(holds))
        .exclude(Exists(holds.filter(returned_at__isnull=True, released_at__isnull=True)))
        .annotate(
            returned=Count("holds", filter=Q(holds__returned_at__isnull=False)),
            released=Count("holds", filter=Q(holds__released_at__isnull=False)),
        )
    )
    for incident in done:
        detail = f"{incident.returned} node(s) reporting again"
        if incident.released:
            detail += f"; {incident.released} handed to per-node judgement"
        close_incident(incident, now=now, actor=actor, detail=detail)
    return len(done)


def open_hold():
    """Exists() probe on a Node queryset: the node is under an open lapse hold (the lease skips it)."""
    return Exists(LapseHold.objects.filter(node=OuterRef("pk"), returned_at__isnull=True, released_at__isnull=True))


def recently_released(since: datetime):
    """Exists() probe on a Node queryset: the node's hold was released after `since` (its lease restarted then)."""
    return Exists(LapseHold.objects.filter(node=OuterRef("pk"), released_at__gte=since))
