"""Process-level Prometheus metrics any loop or view may observe.

    from core.metrics import observe_loop
    observe_loop("health_sweep", seconds)          # duration histogram + last-run gauge

or directly `LOOP_DURATION.labels(loop="x").observe(s)`, `LOOP_LAST_RUN.labels(loop="x").set_to_current_time()`.
They live in their own registry (not the library's global one) so `/metrics` can merge them with the
fleet figures it computes per scrape without duplicate names.
"""

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from core.services.beat_lease import beat_lease

REGISTRY = CollectorRegistry(auto_describe=True)

LOOP_DURATION = Histogram(
    "hangar_loop_duration_seconds",
    "Wall time of one control-loop run",
    ["loop"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
    registry=REGISTRY,
)
LOOP_LAST_RUN = Gauge(
    "hangar_loop_last_run_timestamp_seconds",
    "Unix time a control loop last finished a run (this process)",
    ["loop"],
    registry=REGISTRY,
)
REQUEST_LATENCY = Histogram(
    "hangar_http_request_duration_seconds",
    "Server time of HTTP requests by route pattern",
    ["method", "route", "status"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
    registry=REGISTRY,
)


def observe_loop(loop: str, seconds: float) -> None:
    LOOP_DURATION.labels(loop=loop).observe(seconds)
    LOOP_LAST_RUN.labels(loop=loop).set_to_current_time()


PAGES = Counter(
    "hangar_pages_total",
    "On-call pages sent by the control loops (one per correlated incident)",
    ["scope"],
    registry=REGISTRY,
)


def beat_lease_families(now):
    """Per scrape, from the database: who holds the single-beat lease, how stale it is, and how
    many ticks other beats refused (a non-zero rate means a second beat is running)."""
    lease = beat_lease()
    holder = GaugeMetricFamily("hangar_beat_lease_holder", "The beat holding the single-beat lease", labels=["holder"])
    age = GaugeMetricFamily("hangar_beat_lease_age_seconds", "Seconds since the lease holder last renewed it")
    refused = CounterMetricFamily("hangar_beat_refused_ticks", "Ticks a second beat declined to schedule")
    if lease is not None:
        holder.add_metric([lease.holder], 1)
        age.add_metric([], round((now - lease.renewed_at).total_seconds(), 1))
        refused.add_metric([], lease.refused_ticks)
    yield holder
    yield age
    yield refused
