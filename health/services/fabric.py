"""Correlated fabric failures: one incident for a dead leaf switch or fabric domain, not one
repair ticket per node.

When many nodes behind one leaf switch (fabric domain + `leaf_switch`), or a large share of one
fabric domain (its spine or subnet manager), lose their InfiniBand link within one window, the
cause is the switch, not a cable per node. The sweep then opens ONE incident naming the leaf or
domain, holds the nodes' fabric signals (`health.FabricHold`: the policy does not quarantine
them, drain them or open cable repairs), pages once, and closes the incident when the links are
back. Thresholds (health.policy.fabric_thresholds, settings HEALTH_FABRIC_*): per leaf ≥ min nodes and
≥ a share of its nodes; per domain likewise; by default the same rules the heartbeat lapses use
per leaf and per site.

Only the fabric signals are held: a held node with any other actionable signal is still judged
on that signal. Once most of an incident's nodes have their link back, the few still failing
are their own fault and go back to per-node judgement.

Judged every sweep, level-triggered, in a fixed number of queries (one when no link is down).
"""

import uuid
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Count, Exists, OuterRef, Q

from fleet.choices import Attribution, Lifecycle
from fleet.models import FabricDomain, Node
from health.choices import ConditionStatus, IncidentOpener, IncidentScope, IncidentState, IncidentStep
from health.choices import Severity as S
from health.models import Condition, FabricHold, Incident, IncidentEvent
from health.policy import FABRIC_SIGNALS, fabric_thresholds
from health.services.lapses import OPEN_STATES, close_incident, densest, page

# The lifecycles the health policy may pull (health.services.sweep.POLICY_LIFECYCLES).
JUDGED_LIFECYCLES = (Lifecycle.AVAILABLE, Lifecycle.ACTIVE, Lifecycle.PROVISIONING)
SCOPES = (IncidentScope.FABRIC_DOMAIN, IncidentScope.FABRIC_LEAF)
NodeNodes = Incident.nodes.through

LIKELY_CAUSE = {
    IncidentScope.FABRIC_LEAF: "leaf switch {label}: its nodes lost their InfiniBand links together; "
    "check the switch, its power and its uplinks before any cable",
    IncidentScope.FABRIC_DOMAIN: "fabric domain {label}: links lost across its leaves at once; "
    "check the spine switches and the subnet manager",
}


@dataclass(frozen=True)
class LinkDown:
    node_id: object
    since: datetime  # when its first active fabric signal was raised
    domain: str
    leaf: str | None  # "domain/leaf"
    signals: tuple[str, ...]


def _links_down() -> dict:
    """{node_id: LinkDown} for judged nodes with an active fabric signal (one query)."""
    rows = Condition.objects.filter(
        status=ConditionStatus.ACTIVE,
        signal__in=list(FABRIC_SIGNALS),
        node__lifecycle__in=JUDGED_LIFECYCLES,
        node__fabric_domain__isnull=False,
    ).values_list("node_id", "signal", "first_seen", "node__fabric_domain_id", "node__leaf_switch")
    found: dict = {}
    for node_id, signal, first_seen, domain, leaf in rows:
        seen = found.get(node_id)
        signals = tuple(sorted({signal, *(seen.signals if seen else ())}))
        since = min(first_seen, seen.since) if seen else first_seen
        found[node_id] = LinkDown(node_id, since, str(domain), f"{domain}/{leaf}" if leaf else None, signals)
    return found


def _totals() -> dict:
    """Judged nodes per (scope, key): the denominators of the share rules (one query)."""
    totals: dict = defaultdict(int)
    for domain, leaf, n in (
        Node.objects.filter(lifecycle__in=JUDGED_LIFECYCLES, fabric_domain__isnull=False)
        .values_list("fabric_domain_id", "leaf_switch")
        .annotate(n=Count("id"))
        .order_by()
    ):
        totals[(IncidentScope.FABRIC_DOMAIN, str(domain))] += n
        if leaf:
            totals[(IncidentScope.FABRIC_LEAF, f"{domain}/{leaf}")] += n
    return totals


def _label(scope: str, key: str, names: dict) -> str:
    domain, _, leaf = key.partition("/")
    name = names.get(uuid.UUID(domain), domain)
    return f"{name}/{leaf}" if scope == IncidentScope.FABRIC_LEAF else name


def _open_incident(*, scope: str, key: str, label: str, detail: str, signals, now: datetime, actor: str) -> Incident:
    title = f"{IncidentScope(scope).label} {label}: {detail}"
    incident = Incident.objects.create(
        title=title[:200],
        opened_by=IncidentOpener.POLICY,
        severity=S.WARN,
        signals=sorted(signals),
        opened_at=now,
        attribution=Attribution.PROVIDER,
        scope=scope,
        scope_key=key,
        likely_cause=LIKELY_CAUSE[scope].format(label=label)[:300],
        state=IncidentState.STABILISED,
    )
    IncidentEvent.objects.bulk_create(
        [
            IncidentEvent(incident=incident, at=now, step=IncidentStep.DETECT, actor=actor, detail=title),
            IncidentEvent(
                incident=incident,
                at=now,
                step=IncidentStep.STABILISE,
                actor=actor,
                detail="per-node fabric repairs held: no quarantine, drain or cable ticket for these nodes",
            ),
        ]
    )
    return incident  # paged by the caller once its nodes are attached (the page lists them)


def judge_fabric(*, now: datetime, actor: str) -> dict:
    """Hold correlated link failures, end holds whose links are back, close finished incidents."""
    summary = {"fabric_held": 0, "fabric_returned": 0, "fabric_released": 0, "fabric_incidents": 0}
    down = _links_down()
    open_holds = list(FabricHold.objects.filter(returned_at__isnull=True, released_at__isnull=True))
    back = [h for h in open_holds if h.node_id not in down]
    if back:
        FabricHold.objects.filter(pk__in=[h.pk for h in back]).update(returned_at=now)
        summary["fabric_returned"] = len(back)
    held_ids = {h.node_id for h in open_holds}
    unheld = [d for d in down.values() if d.node_id not in held_ids]
    if unheld:
        summary.update(_hold(unheld, now=now, actor=actor))
    summary["fabric_released"] = _release_stragglers(open_holds, back, now=now, actor=actor)
    summary["fabric_closed"] = _close_finished(now=now, actor=actor)
    return summary


def _hold(unheld: list[LinkDown], *, now: datetime, actor: str) -> dict:
    """Domain first (it explains every leaf under it), then leaf."""
    totals = _totals()
    rules = fabric_thresholds()
    names: dict = {}
    new_holds: list[FabricHold] = []
    opened = 0
    taken: set = set()
    to_page: list[Incident] = []
    for scope, min_nodes, share in (
        (IncidentScope.FABRIC_DOMAIN, rules.domain_min_nodes, rules.domain_share),
        (IncidentScope.FABRIC_LEAF, rules.leaf_min_nodes, rules.leaf_share),
    ):
        groups: dict = defaultdict(list)
        for d in unheld:
            key = d.domain if scope == IncidentScope.FABRIC_DOMAIN else d.leaf
            if key is not None and d.node_id not in taken:
                groups[key].append(d)
        correlated = {}
        for key, members in groups.items():
            together = densest(members, rules.window)
            if len(together) >= min_nodes and len(together) >= share * totals[(scope, key)]:
                correlated[key] = together
        if not correlated:
            continue
        existing = {
            i.scope_key: i
            for i in Incident.objects.filter(scope=scope, scope_key__in=list(correlated), state__in=OPEN_STATES)
        }
        missing = {uuid.UUID(k.split("/")[0]) for k in correlated} - set(names)
        if missing:
            names.update(FabricDomain.objects.filter(pk__in=missing).values_list("pk", "name"))
        for key, together in correlated.items():
            detail = (
                f"{len(together)} of {totals[(scope, key)]} nodes lost their fabric link within "
                f"{int(rules.window.total_seconds())} s"
            )
            incident = existing.get(key)
            signals = {s for d in together for s in d.signals}
            if incident is None:
                label = _label(scope, key, names)
                incident = _open_incident(
                    scope=scope, key=key, label=label, detail=detail, signals=signals, now=now, actor=actor
                )
                opened += 1
                to_page.append(incident)
            else:
                IncidentEvent.objects.create(
                    incident=incident,
                    at=now,
                    step=IncidentStep.NOTE,
                    actor=actor,
                    detail=f"{len(together)} more node(s) lost their link; {detail}",
                )
            new_holds += [
                FabricHold(
                    incident=incident, node_id=d.node_id, held_at=now, failing_since=d.since, signals=list(d.signals)
                )
                for d in together
            ]
            taken.update(d.node_id for d in together)
    if new_holds:
        FabricHold.objects.bulk_create(new_holds)
        NodeNodes.objects.bulk_create(
            [NodeNodes(incident_id=h.incident_id, node_id=h.node_id) for h in new_holds], ignore_conflicts=True
        )
    for incident in to_page:
        page(incident, now=now, actor=actor)
    return {"fabric_held": len(new_holds), "fabric_incidents": opened}


def _release_stragglers(open_holds, back, *, now: datetime, actor: str) -> int:
    """Once at least as many of an incident's nodes have their link back as are still down, and
    fewer than a leaf's threshold are still down, those are node faults: judge them per node."""
    back_ids = {h.pk for h in back}
    still: dict = defaultdict(list)
    for h in open_holds:
        if h.pk not in back_ids:
            still[h.incident_id].append(h)
    if not still:
        return 0
    returned = dict(
        FabricHold.objects.filter(incident_id__in=list(still), returned_at__isnull=False)
        .values("incident_id")
        .annotate(n=Count("id"))
        .values_list("incident_id", "n")
    )
    release = [
        h
        for incident_id, holds in still.items()
        if returned.get(incident_id, 0) >= len(holds) and len(holds) < fabric_thresholds().leaf_min_nodes
        for h in holds
    ]
    if not release:
        return 0
    FabricHold.objects.filter(pk__in=[h.pk for h in release]).update(released_at=now)
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
                detail=f"{n} node(s) still without a link after the rest came back: judged on their own from now",
            )
            for i, n in by_incident.items()
        ]
    )
    return len(release)


def _close_finished(*, now: datetime, actor: str) -> int:
    holds = FabricHold.objects.filter(incident=OuterRef("pk"))
    done = list(
        Incident.objects.filter(scope__in=SCOPES, state__in=OPEN_STATES)
        .filter(Exists(holds))
        .exclude(Exists(holds.filter(returned_at__isnull=True, released_at__isnull=True)))
        .annotate(
            returned=Count("fabric_holds", filter=Q(fabric_holds__returned_at__isnull=False)),
            released=Count("fabric_holds", filter=Q(fabric_holds__released_at__isnull=False)),
        )
    )
    for incident in done:
        detail = f"{incident.returned} node(s) have their fabric link back"
        if incident.released:
            detail += f"; {incident.released} handed to per-node judgement"
        close_incident(incident, now=now, actor=actor, detail=detail)
    return len(done)


def fabric_held():
    """Exists() probe on a Condition queryset: a fabric signal of a node under an open fabric hold
    (the policy skips it)."""
    return Q(signal__in=list(FABRIC_SIGNALS)) & Exists(
        FabricHold.objects.filter(node=OuterRef("node_id"), returned_at__isnull=True, released_at__isnull=True)
    )
