"""Prometheus metrics: process-level ones any view may observe (request latency, pages), and
the loops' figures, read per scrape from the database (core.loop_metrics) so that `/metrics`
in the web process shows what the Celery workers did.

    from core.metrics import observe_loop
    observe_loop("health_sweep", seconds)          # one pass: last run, duration, count (all processes)

The process metrics live in their own registry (not the library's global one) so `/metrics` can
merge them with the figures it computes per scrape without duplicate names.
"""

from django.db.models import Count
from django.utils import timezone
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, SummaryMetricFamily

from core.choices import DeliveryState
from core.loop_metrics import loop_statuses, record_loop_run
from core.models import OutboxDelivery
from core.services.beat_lease import beat_lease

REGISTRY = CollectorRegistry(auto_describe=True)

REQUEST_LATENCY = Histogram(
    "hangar_http_request_duration_seconds",
    "Server time of HTTP requests by route pattern",
    ["method", "route", "status"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
    registry=REGISTRY,
)


def observe_loop(loop: str, seconds: float) -> None:
    """A pass of `loop` that is not a periodic Celery task (those are recorded by a signal)."""
    record_loop_run(loop, seconds=seconds, finished_at=timezone.now())


def loop_families(now):
    """Every periodic loop, from the database: last finished pass, its duration, passes and
    their total time, failures, lag (seconds past due), next due time and grace (the rule of
    core.loop_metrics, which the alert rules repeat), and when the scheduler started."""
    last = GaugeMetricFamily(
        "hangar_loop_last_run_timestamp_seconds", "Unix time the loop last finished a pass (0: never)", labels=["loop"]
    )
    duration = GaugeMetricFamily(
        "hangar_loop_last_duration_seconds", "Wall time of the loop's last pass", labels=["loop"]
    )
    total = SummaryMetricFamily("hangar_loop_duration_seconds", "Wall time of the loop's passes", labels=["loop"])
    failures = CounterMetricFamily("hangar_loop_failures", "Passes of the loop that raised", labels=["loop"])
    lag = GaugeMetricFamily(
        "hangar_loop_lag_seconds",
        "Seconds the loop is past its next due time (0 on time)",
        labels=["loop"],
    )
    late = GaugeMetricFamily(
        "hangar_loop_late", "1 when the loop's next due time plus its grace has passed without a pass", labels=["loop"]
    )
    due = GaugeMetricFamily(
        "hangar_loop_next_due_timestamp_seconds",
        "Unix time the loop is next due: an interval after its last pass or the scheduler's start (0: no scheduler)",
        labels=["loop"],
    )
    grace = GaugeMetricFamily(
        "hangar_loop_grace_seconds", "How long past its due time the loop may be before it is late", labels=["loop"]
    )
    statuses = loop_statuses(now)
    started = GaugeMetricFamily(
        "hangar_scheduler_started_timestamp_seconds",
        "Unix time the running scheduler (Celery beat's lease holder or run_loops) started (0: none ever did)",
    )
    first = statuses[0].scheduler_started_at if statuses else None
    started.add_metric([], first.timestamp() if first else 0)
    for status in statuses:
        label = [status.name]
        last.add_metric(label, status.last_finished_at.timestamp() if status.last_finished_at else 0)
        if status.last_duration_s is not None:
            duration.add_metric(label, status.last_duration_s)
        total.add_metric(label, count_value=status.runs, sum_value=status.total_seconds)
        failures.add_metric(label, status.failures)
        lag.add_metric(label, status.lag_s)
        late.add_metric(label, 1 if status.late else 0)
        due.add_metric(label, status.due_at.timestamp())
        grace.add_metric(label, status.grace_s)
    yield from (last, duration, total, failures, lag, late, due, grace, started)


PAGES = Counter(
    "hangar_pages_total",
    "On-call pages sent by the control loops (one per correlated incident)",
    ["scope"],
    registry=REGISTRY,
)


_FAMILIES: list = []


def register_families(fn) -> None:
    """An app's per-scrape figures (fn(now) yields metric families), registered from its
    AppConfig.ready(): /metrics (fleet) shows them without importing apps above it."""
    if fn not in _FAMILIES:
        _FAMILIES.append(fn)


def registered_families(now):
    for fn in _FAMILIES:
        yield from fn(now)


def outbox_families(now):
    """Notification deliveries waiting (pending) and dead-lettered, by channel kind."""
    waiting = GaugeMetricFamily(
        "hangar_notification_deliveries",
        "Notification deliveries pending or dead-lettered",
        labels=["state", "channel"],
    )
    rows = (
        OutboxDelivery.objects.filter(state__in=(DeliveryState.PENDING, DeliveryState.DEAD))
        .values_list("state", "channel")
        .annotate(n=Count("id"))
        .order_by()
    )
    for state, channel, n in rows:
        waiting.add_metric([state, channel], n)
    yield waiting


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
