"""Health's identifiers in the console search (core.search): incident id."""

from django.db.models import Count
from django.urls import reverse

from core.search import Described, Kind, register

from .choices import IncidentState
from .models import Incident


def describe_incidents(ids: list[str]) -> dict[str, Described]:
    rows = Incident.objects.filter(pk__in=ids).values("pk", "title", "state", "severity").annotate(nodes=Count("nodes"))
    return {
        str(r["pk"]): Described(
            f"incident {r['title']}",
            reverse("health:incident", args=[r["pk"]]),
            f"{IncidentState(r['state']).label} · {r['severity']} · {r['nodes']} node(s)",
        )
        for r in rows
    }


register(Incident, kinds=[Kind("incident_id", "Incident id", "pk")], describe=describe_incidents)
