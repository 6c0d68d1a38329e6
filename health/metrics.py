"""Health's figures on /metrics (registered with core.metrics from HealthConfig.ready()):
open incidents by severity and scope, and pages nobody has acknowledged."""

from django.db.models import Count
from prometheus_client.core import GaugeMetricFamily

from health.choices import Severity
from health.models import Incident
from health.services.paging import OPEN_STATES


def incident_families(now):
    incidents = GaugeMetricFamily(
        "hangar_incidents_open", "Open incidents by severity and scope", labels=["severity", "scope"]
    )
    counts = dict(
        ((severity, scope), n)
        for severity, scope, n in Incident.objects.filter(state__in=OPEN_STATES)
        .values_list("severity", "scope")
        .annotate(n=Count("id"))
        .order_by()
    )
    for severity in Severity.values:  # every severity, zero included: an alert rule sees 0, not nothing
        if not any(key[0] == severity for key in counts):
            incidents.add_metric([severity, "node"], 0)
    for (severity, scope), n in sorted(counts.items()):
        incidents.add_metric([severity, scope], n)
    yield incidents
    waiting = GaugeMetricFamily(
        "hangar_pages_unacknowledged", "Incidents paged and neither acknowledged nor resolved", labels=["severity"]
    )
    rows = dict(
        Incident.objects.filter(
            paged_at__isnull=False, page_acknowledged_at__isnull=True, page_resolved_at__isnull=True
        )
        .values_list("severity")
        .annotate(n=Count("id"))
        .order_by()
    )
    for severity in Severity.values:
        waiting.add_metric([severity], rows.get(severity, 0))
    yield waiting
