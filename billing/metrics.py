"""Billing's figures on /metrics (registered with core.metrics from BillingConfig.ready()):
whether the ledger database answers, and meter events refused this hour by reason."""

from django.db import DatabaseError
from django.db.models import Sum
from prometheus_client.core import GaugeMetricFamily

from billing.models import RejectedMeterTally


def ledger_families(now):
    up = GaugeMetricFamily("hangar_ledger_up", "1 when the ledger database answered this scrape")
    refused = GaugeMetricFamily(
        "hangar_ledger_meter_refused_this_hour", "Meter events ingest refused in the current UTC hour", labels=["code"]
    )
    hour = now.replace(minute=0, second=0, microsecond=0)
    try:
        rows = list(
            RejectedMeterTally.objects.filter(hour=hour).values_list("code").annotate(n=Sum("refused")).order_by()
        )
    except DatabaseError:
        up.add_metric([], 0)
        yield up
        return
    up.add_metric([], 1)
    for code, n in rows:
        refused.add_metric([code], n)
    yield up
    yield refused
