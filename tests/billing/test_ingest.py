"""POST /api/agent/v1/meter-events: dedupe, conflicts, validation, and no control-plane reads.
(What grants refuse: test_meter_attacks.py.)"""

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connections

from billing.models import UsageEvent

from .conftest import LEDGER_DBS, granted, make_event

pytestmark = pytest.mark.django_db(databases=LEDGER_DBS)
URL = "/api/agent/v1/meter-events"
T0 = (datetime.now(UTC) - timedelta(days=1)).replace(minute=0, second=0, microsecond=0)


@pytest.fixture
def post(agent_api, node_id):
    """POST events as the node's agent, each with the grant desired-state gave it."""

    def run(events):
        return agent_api.post(URL, {"events": granted(events, node_id)}, format="json")

    return run


def test_batch_is_accepted_and_records_the_tokens_node(post, node_id, django_assert_num_queries):
    tenant = uuid.uuid4()
    events = [make_event(tenant_id=tenant, start=T0.replace(minute=i)) for i in range(10)]
    with django_assert_num_queries(0, connection=connections["default"]):
        response = post(events)
    assert response.status_code == 202, response.content
    assert response.json() == {"accepted": 10, "duplicates": 0, "rejected": []}
    assert set(UsageEvent.objects.values_list("node_id", flat=True)) == {node_id}
    assert sum(UsageEvent.objects.values_list("quantity_micro", flat=True)) == 10 * 480 * 10**6


def test_resending_counts_duplicates_and_never_charges_twice(post):
    events = [make_event(tenant_id=uuid.uuid4(), start=T0)]
    post(events)
    again = post(events + events)
    assert again.status_code == 202
    assert again.json() == {"accepted": 0, "duplicates": 2, "rejected": []}
    assert UsageEvent.objects.count() == 1


def test_same_id_with_different_content_is_422_and_stores_nothing(post):
    event = make_event(tenant_id=uuid.uuid4(), start=T0)
    post([event])
    changed = {**event, "quantity": "399"}
    fresh = make_event(tenant_id=uuid.uuid4(), start=T0)
    response = post([fresh, changed])
    assert response.status_code == 422
    assert response.json()["code"] == "event_conflict"
    assert response.json()["event_ids"] == [event["event_id"]]
    assert UsageEvent.objects.count() == 1


@pytest.mark.parametrize(
    "field,value",
    [
        ("end", "before start"),
        ("quantity", "-1"),
        ("quantity", 480),  # a JSON number, not a decimal string
        ("quantity", "1.0000001"),
        ("unit", "gpu_hour"),
        ("start", "2026-10-05 12:00"),  # no timezone
        ("tenant_id", "acme"),
        ("sku", "tpu-v5"),
        ("sku", ["h100-sxm-8x"]),
        ("event_id", {"nested": 1}),
    ],
)
def test_invalid_events_are_400_with_field_errors(agent_api, field, value):
    event = {**make_event(tenant_id=uuid.uuid4(), start=T0), "grant": "hgm1.checked.later", field: value}
    if field == "end":
        event["end"] = (T0 - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    response = agent_api.post(URL, {"events": [event]}, format="json")
    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "validation_error"
    assert any(error["field"] == f"events[0].{field}" for error in body["errors"])
    assert UsageEvent.objects.count() == 0


def test_batch_limits(agent_api):
    too_many = [make_event(tenant_id=uuid.UUID(int=5), start=T0)] * 1001
    assert agent_api.post(URL, {"events": too_many}, format="json").status_code == 400
    assert agent_api.post(URL, {"events": []}, format="json").status_code == 400
    assert agent_api.post(URL, {"nothing": 1}, format="json").status_code == 400


def test_only_agent_signatures_are_accepted(api, ops_api):
    event = make_event(tenant_id=uuid.uuid4(), start=T0)
    assert api.post(URL, {"events": [event]}, format="json").status_code == 401
    assert ops_api.post(URL, {"events": [event]}, format="json").status_code == 401
    api.credentials(HTTP_AUTHORIZATION="Bearer hga1.00000000-0000-0000-0000-000000000001.forged")
    assert api.post(URL, {"events": [event]}, format="json").status_code == 401


def test_event_crossing_a_month_boundary_is_split_exactly(node_id):
    from billing.services.ingest import ingest_meter_events

    start = datetime(2026, 10, 31, 23, 59, 30, tzinfo=UTC)
    [event] = granted([make_event(tenant_id=uuid.uuid4(), start=start, seconds=61, gpus=8)], node_id)  # 30 s + 31 s
    arrived = start + timedelta(minutes=5)
    assert ingest_meter_events(node_id=node_id, events=[event], received_at=arrived).accepted == 1
    pieces = list(UsageEvent.objects.order_by("part").values_list("period", "quantity_micro"))
    assert [p[0].month for p in pieces] == [10, 11]
    assert [p[1] for p in pieces] == [240 * 10**6, 248 * 10**6]
    again = ingest_meter_events(node_id=node_id, events=[event], received_at=arrived)
    assert (again.accepted, again.duplicates) == (0, 1)


def test_replaying_10000_events_twice_bills_once(ingest):
    from billing.services.runs import run_billing

    tenant = uuid.uuid4()
    events = [
        make_event(
            tenant_id=tenant,
            start=datetime(2026, 9, 1, tzinfo=UTC).replace(minute=i % 60, hour=i // 60 % 24, day=1 + i // 1440),
        )
        for i in range(10_000)
    ]
    assert ingest(events) == (10_000, 0)
    assert ingest(events) == (0, 10_000)
    outcome = run_billing(period=datetime(2026, 9, 1).date(), finalize=False, actor="test")
    assert outcome.run.invoices == 1
    from billing.models import Invoice

    invoice = Invoice.objects.get(tenant_id=tenant)
    assert str(invoice.lines.get().quantity) == "1333.333333"  # 10,000 × 8 GPUs × 60 s
    assert str(invoice.total) == "3133.33"  # × 2.35 USD per GPU-hour
