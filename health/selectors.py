"""Health reads for pages, APIs and other apps (fixed query counts)."""

from datetime import datetime, timedelta

from django.db.models import Count, F, Min, Prefetch, Q

from core.loop_metrics import loop_statuses
from fleet.choices import Health, Lifecycle
from fleet.models import Node, NodeEvent
from health.choices import ConditionStatus
from health.models import Condition, FabricHold, Incident, IncidentEvent, IncidentImpact
from health.services.incidents import OPEN_STATES


def conditions_for_nodes(node_ids) -> dict:
    """{node_id: [condition dicts]} of active conditions (one query; nodes without any → [])."""
    out: dict = {node_id: [] for node_id in node_ids}
    rows = (
        Condition.objects.filter(node_id__in=list(node_ids), status=ConditionStatus.ACTIVE)
        .order_by("node_id", "gpu_index", "signal")
        .values("node_id", "gpu_index", "signal", "severity", "first_seen", "last_seen", "count", "detail")
    )
    for row in rows:
        node_id = row.pop("node_id")
        out.setdefault(node_id, []).append(row)
    return out


def health_by_rack() -> list[dict]:
    """Nodes per (hall, rack, health, lifecycle): one aggregate query."""
    return list(
        Node.objects.values("rack_id", hall=F("rack__hall__name"), rack_name=F("rack__name"))
        .annotate(n=Count("id"))
        .values("hall", "rack_id", "rack_name", "health", "lifecycle", "n")
        .order_by("hall", "rack_name")
    )


def health_by_hall() -> list[dict]:
    return list(
        Node.objects.values(hall=F("rack__hall__name"))
        .annotate(n=Count("id"))
        .values("hall", "health", "lifecycle", "n")
        .order_by("hall", "health", "lifecycle")
    )


def open_incidents(limit: int = 50, severity: str | None = None) -> list[Incident]:
    rows = Incident.objects.filter(state__in=OPEN_STATES)
    if severity:
        rows = rows.filter(severity=severity)
    return list(rows.prefetch_related("nodes").order_by("-opened_at")[:limit])


SEVERITY_ORDER = ("fatal", "repair", "reboot", "reset", "warn", "info")  # worst first
NOW_NODES = 8  # the overview names the longest-unwell nodes, the list has them all
GONE_STATES = (Lifecycle.RETIRED, Lifecycle.DISPOSED)


def affected_tenant_slugs() -> list[str]:
    """Tenants with an allocation that lost a node to an open incident (its impact still open)."""
    return list(
        IncidentImpact.objects.filter(end__isnull=True, incident__state__in=OPEN_STATES)
        .values_list("tenant__slug", flat=True)
        .distinct()
        .order_by("tenant__slug")
    )


def what_is_wrong_now(now: datetime) -> dict:
    """The operator overview's first row, in six queries whatever the fleet size: open incidents
    by severity, unhealthy/degraded/unknown nodes (the longest-unwell first, with since when),
    late loops, affected tenants."""
    by_severity = dict(
        Incident.objects.filter(state__in=OPEN_STATES).values_list("severity").annotate(n=Count("id")).order_by()
    )
    unwell = Node.objects.exclude(health=Health.HEALTHY).exclude(lifecycle__in=GONE_STATES)
    by_health = dict(unwell.values_list("health").annotate(n=Count("id")).order_by())
    longest = list(
        unwell.annotate(unwell_since=Min("conditions__first_seen", filter=Q(conditions__status=ConditionStatus.ACTIVE)))
        .values("id", "hostname", "health", "lifecycle", "last_heartbeat_at", "unwell_since")
        .order_by(F("unwell_since").asc(nulls_first=True), F("last_heartbeat_at").asc(nulls_first=True), "hostname")[
            :NOW_NODES
        ]
    )
    loops = loop_statuses(now)
    return {
        "incidents": [(s, by_severity[s]) for s in SEVERITY_ORDER if s in by_severity]
        + [(s, n) for s, n in sorted(by_severity.items()) if s not in SEVERITY_ORDER],
        "incident_total": sum(by_severity.values()),
        "unwell": [(h, by_health[h]) for h in (Health.UNHEALTHY, Health.DEGRADED, Health.UNKNOWN) if h in by_health],
        "unwell_total": sum(by_health.values()),
        "longest_unwell": longest,
        "loops": loops,
        "late_loops": [loop for loop in loops if loop.late],
        "tenants": affected_tenant_slugs(),
    }


def repair_times(since: datetime) -> list[dict]:
    """Incidents that returned since `since`: opened_at and the first return (one query)."""
    return list(
        IncidentEvent.objects.filter(step="return", at__gte=since)
        .values("incident_id")
        .annotate(returned=Min("at"))
        .values("incident_id", "returned", "incident__opened_at")
    )


def mean_time_to_repair(since: datetime) -> timedelta | None:
    rows = repair_times(since)
    if not rows:
        return None
    total = sum(((r["returned"] - r["incident__opened_at"]) for r in rows), timedelta())
    return total / len(rows)


def failure_causes(since: datetime) -> list[dict]:
    """Incidents opened per day and first signal since `since` (rows for charts)."""
    counts: dict = {}
    for opened_at, signals in Incident.objects.filter(opened_at__gte=since).values_list("opened_at", "signals"):
        key = (opened_at.date().isoformat(), (signals or ["operator"])[0])
        counts[key] = counts.get(key, 0) + 1
    return [{"day": day, "signal": signal, "n": n} for (day, signal), n in sorted(counts.items())]


def incident_detail(pk) -> Incident | None:
    return (
        Incident.objects.filter(pk=pk)
        .prefetch_related(
            "nodes",
            Prefetch("events", queryset=IncidentEvent.objects.order_by("at", "id")),
            # which nodes a fabric incident holds, since when, behind which leaf/domain (one query)
            Prefetch(
                "fabric_holds",
                queryset=FabricHold.objects.select_related("node", "node__fabric_domain").order_by(
                    "node__hostname", "held_at"
                ),
            ),
            "impacts__allocation",
            "impacts__tenant",
            "impacts__node",
        )
        .first()
    )


def node_history(node_ids) -> list[NodeEvent]:
    return list(NodeEvent.objects.filter(node_id__in=list(node_ids)).order_by("-at")[:50])
