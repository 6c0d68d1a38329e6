"""Health reads for pages, APIs and other apps (fixed query counts)."""

from datetime import datetime, timedelta

from django.db.models import Count, F, Min, Prefetch

from fleet.models import Node, NodeEvent
from health.choices import ConditionStatus
from health.models import Condition, Incident, IncidentEvent
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


def open_incidents(limit: int = 50) -> list[Incident]:
    return list(Incident.objects.filter(state__in=OPEN_STATES).prefetch_related("nodes").order_by("-opened_at")[:limit])


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
            "impacts__allocation",
            "impacts__tenant",
            "impacts__node",
        )
        .first()
    )


def node_history(node_ids) -> list[NodeEvent]:
    return list(NodeEvent.objects.filter(node_id__in=list(node_ids)).order_by("-at")[:50])
