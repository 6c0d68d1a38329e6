"""`/metrics`: Prometheus text for an operator bearer token (docs/api.md, "Console pages").

Fleet figures are computed per scrape by a collector in a fresh registry, from the same
aggregate selectors the dashboards use (a handful of grouped queries, whatever the fleet size);
loop durations and request latency come from core.metrics' process registry.
"""

from django.db.models import Count, F, Q, Sum
from django.http import HttpResponse
from django.utils import timezone
from django_celery_beat.models import PeriodicTask
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.views import APIView

from core import metrics as process_metrics
from core.api.authentication import BearerTokenAuthentication
from core.api.permissions import IsOperator

from .models import Node, NodeBMC
from .selectors import drift_report, hall_power, racks_with_draw


class FleetCollector:
    def collect(self):
        now = timezone.now()
        gpus = GaugeMetricFamily(
            "hangar_gpus", "GPUs by node lifecycle state and generation", labels=["state", "generation"]
        )
        nodes = GaugeMetricFamily("hangar_nodes", "Nodes by lifecycle and health", labels=["lifecycle", "health"])
        per_state: dict[tuple[str, str], int] = {}
        per_health: dict[tuple[str, str], int] = {}
        for row in (
            Node.objects.values(generation=F("node_type__generation"), state=F("lifecycle"), h=F("health"))
            .annotate(n=Count("id"), g=Sum("node_type__gpus_per_node"))
            .order_by()
        ):
            per_state[(row["state"], row["generation"])] = (
                per_state.get((row["state"], row["generation"]), 0) + row["g"]
            )
            per_health[(row["state"], row["h"])] = per_health.get((row["state"], row["h"]), 0) + row["n"]
        for (state, generation), value in sorted(per_state.items()):
            gpus.add_metric([state, generation], value)
        for (lifecycle, health), value in sorted(per_health.items()):
            nodes.add_metric([lifecycle, health], value)
        yield gpus
        yield nodes

        # `source`: bmc / pdu (a meter), estimate (GPU power + host share), rated, or mixed.
        rack_kw = GaugeMetricFamily(
            "hangar_rack_power_kw",
            "Rack wall (IT) draw (kW); source says how it is known",
            labels=["rack", "hall", "source"],
        )
        rack_age = GaugeMetricFamily(
            "hangar_rack_power_reading_age_seconds",
            "Age of the oldest reading in the rack's draw (absent when all rated)",
            labels=["rack", "hall", "source"],
        )
        rack_rated = GaugeMetricFamily(
            "hangar_rack_usable_kw", "What the rack can power and cool (kW)", labels=["rack", "hall"]
        )
        for rack in (r for r in racks_with_draw(now=now) if r.node_count):
            hall = rack.hall
            rack_kw.add_metric([rack.name, hall, rack.sources.source], round(rack.drawn, 3))
            if rack.age_s is not None:
                rack_age.add_metric([rack.name, hall, rack.sources.source], rack.age_s)
            rack_rated.add_metric([rack.name, hall], float(rack.usable_kw))
        yield rack_kw
        yield rack_age
        yield rack_rated

        hall_kw = GaugeMetricFamily(
            "hangar_hall_power_kw", "Hall wall (IT) draw (kW); source says how it is known", labels=["hall", "source"]
        )
        hall_age = GaugeMetricFamily(
            "hangar_hall_power_reading_age_seconds",
            "Age of the oldest reading in the hall's draw (absent when all rated)",
            labels=["hall", "source"],
        )
        hall_nodes = GaugeMetricFamily(
            "hangar_hall_power_nodes", "Nodes behind the hall's draw, by how each is known", labels=["hall", "source"]
        )
        budget = GaugeMetricFamily("hangar_hall_power_budget_kw", "Hall IT power budget (kW)", labels=["hall"])
        facility = GaugeMetricFamily(
            "hangar_hall_facility_power_kw", "Hall facility draw: IT draw × PUE (kW)", labels=["hall", "source"]
        )
        for hall in hall_power(now=now):
            source = hall.sources.source
            hall_kw.add_metric([hall.name, source], hall.drawn_kw)
            if hall.age_s is not None:
                hall_age.add_metric([hall.name, source], hall.age_s)
            for name, count in hall.sources.counts.items():
                hall_nodes.add_metric([hall.name, name], count)
            budget.add_metric([hall.name], hall.budget_kw)
            facility.add_metric([hall.name, source], hall.facility_kw)
        yield hall_kw
        yield hall_age
        yield hall_nodes
        yield budget
        yield facility
        yield from agent_clock_skew()
        yield from software_drift()
        yield from periodic_task_lag(now)
        yield from process_metrics.beat_lease_families(now)
        yield from process_metrics.loop_families(now)
        yield from process_metrics.outbox_families(now)
        yield from bmc_reachability()
        yield from process_metrics.registered_families(now)
        yield from process_metrics.REGISTRY.collect()


def bmc_reachability():
    """BMC records by whether the last request reached the BMC (unknown: never tried)."""
    bmcs = GaugeMetricFamily(
        "hangar_bmcs", "Node BMC records by reachability at the last request", labels=["reachable"]
    )
    counts = dict(NodeBMC.objects.values_list("reachable").annotate(n=Count("id")).order_by())
    for key, label in ((True, "yes"), (False, "no"), (None, "unknown")):
        bmcs.add_metric([label], counts.get(key, 0))
    yield bmcs


def agent_clock_skew():
    """Each agent's clock against the server's, as measured at its last heartbeat. Only clocks
    off by a second or more get a per-node series (a healthy, NTP-synced fleet adds none)."""
    skew = GaugeMetricFamily(
        "hangar_agent_clock_skew_seconds",
        "Agent clock minus server clock at the last heartbeat (nodes off by >= 1 s)",
        labels=["node"],
    )
    worst = 0
    for hostname, seconds in Node.objects.filter(
        Q(agent_clock_skew_s__gte=1) | Q(agent_clock_skew_s__lte=-1)
    ).values_list("hostname", "agent_clock_skew_s"):
        skew.add_metric([hostname], seconds)
        worst = max(worst, abs(seconds))
    yield skew
    yield GaugeMetricFamily(
        "hangar_agent_clock_skew_max_abs_seconds", "Largest agent clock skew in the fleet (seconds)", value=worst
    )


def software_drift():
    """Nodes off their type's golden baseline, per component (drift is computed, never stored)."""
    off = GaugeMetricFamily(
        "hangar_nodes_off_baseline",
        "Nodes whose reported version of a component differs from their type's golden baseline",
        labels=["node_type", "component"],
    )
    unreported = GaugeMetricFamily(
        "hangar_nodes_software_unreported",
        "Nodes of a type with a golden baseline that have not reported their software stack",
        labels=["node_type"],
    )
    report = drift_report()
    for group in report.groups:
        off.add_metric([group.node_type, group.component], group.drifting_count)
    for slug, count in sorted(report.unreported.items()):
        unreported.add_metric([slug], count)
    yield off
    yield unreported


def periodic_task_lag(now):
    """Seconds since each beat-scheduled task last started, across every worker (from beat's table)."""

    lag = GaugeMetricFamily(
        "hangar_periodic_task_last_run_age_seconds", "Seconds since Celery beat last started the task", labels=["task"]
    )
    for name, last_run in PeriodicTask.objects.filter(enabled=True, last_run_at__isnull=False).values_list(
        "task", "last_run_at"
    ):
        lag.add_metric([name], round((now - last_run).total_seconds(), 1))
    yield lag


class _AnyAccept(BaseContentNegotiation):
    """Scrapers send OpenMetrics/text Accept headers; errors still render as problem+json."""

    def select_renderer(self, request, renderers, format_suffix=None):
        return renderers[0], renderers[0].media_type

    def select_parser(self, request, parsers):
        return parsers[0] if parsers else None


class MetricsView(APIView):
    authentication_classes = [BearerTokenAuthentication]
    permission_classes = [IsOperator]
    content_negotiation_class = _AnyAccept
    schema = None

    def get(self, request):
        registry = CollectorRegistry(auto_describe=False)
        registry.register(FleetCollector())
        return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
