"""Usage bounded per interval, and the rest of what a rented node's agent token can throw at the
ledger, written as the attacker's requests: twenty events for the same minute of an 8-GPU grant
(one is charged), quantities no decimal column holds (400, nothing lost), another node's event
id in a batch (that event alone refused), usage from before the allocation started (held), and
a flood of refused events (counted, a few kept)."""

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from rest_framework.test import APIClient

from billing.grants import MeteringGrant, sign_grant
from billing.models import RejectedMeterEvent, RejectedMeterTally, UsageDispute, UsageEvent
from billing.services.ingest import ingest_meter_events
from core.api.agent_tokens import mint_agent_token

from . import test_meter_attacks as attacks
from .conftest import LEDGER_DBS, rfc
from .test_meter_attacks import METER, _event, _post

rented = attacks.rented  # the rented node, its agent and its grant

pytestmark = pytest.mark.django_db(databases=LEDGER_DBS)


def test_twenty_events_for_one_minute_of_an_8_gpu_grant_charge_it_once(rented):
    minute = (datetime.now(UTC) - timedelta(minutes=5)).replace(second=0, microsecond=0)
    events = [
        {**_event(rented), "start": rfc(minute), "end": rfc(minute + timedelta(seconds=60)), "quantity": "480"}
        for _ in range(20)
    ]
    body = _post(rented, *events)
    assert body["accepted"] == 1
    assert {item["code"] for item in body["rejected"]} == {"exceeds_interval_capacity"}
    assert len(body["rejected"]) == 19
    assert "billed once" in body["rejected"][0]["detail"]
    assert sum(UsageEvent.objects.values_list("quantity_micro", flat=True)) == 480 * 10**6
    # the same twenty again, one batch each: still one minute billed
    again = [_post(rented, {**e, "event_id": str(uuid.uuid4())}) for e in events]
    assert sum(b["accepted"] for b in again) == 0
    # a half-loaded minute (4 GPUs) leaves room for exactly the other half
    later = minute + timedelta(minutes=1)
    half = {**_event(rented), "start": rfc(later), "end": rfc(later + timedelta(seconds=60)), "quantity": "240"}
    other_half = {**half, "event_id": str(uuid.uuid4())}
    one_more = {**half, "event_id": str(uuid.uuid4()), "quantity": "1"}
    assert _post(rented, half, other_half, one_more)["accepted"] == 2


# ---- the family: random overlapping intervals never bill more than GPUs × their union ----------

GPUS = 8
ORIGIN = datetime(2026, 9, 2, 10, tzinfo=UTC)


def _union_seconds(intervals: list[tuple[int, int]]) -> int:
    """The oracle: the length of a union of [a, b) second intervals, by merging (not the code's
    density sweep)."""
    total, end = 0, None
    for a, b in sorted(intervals):
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


def _peak_gpus(accepted: list[tuple[int, int, int]]) -> float:
    """The oracle's instantaneous load: at each second, the GPUs each covering event spreads."""
    points = sorted({t for a, b, _ in accepted for t in (a, b)})
    return max(
        (sum(q / (b - a) for a, b, q in accepted if a <= t < b) for t in points[:-1]),
        default=0.0,
    )


INTERVALS = st.lists(
    st.tuples(st.integers(0, 600), st.integers(1, 300), st.integers(0, 100)),  # start s, length s, % of the cap
    min_size=1,
    max_size=24,
)


def _grant(node_id, tenant_id, allocation_id) -> str:
    return sign_grant(
        MeteringGrant(
            node_id=node_id,
            tenant_id=tenant_id,
            allocation_id=allocation_id,
            sku="h100-sxm-8x",
            gpus=GPUS,
            valid_from=ORIGIN - timedelta(hours=1),
            valid_until=ORIGIN + timedelta(hours=4),
        )
    )


def _send(node_id, grant, tenant_id, allocation_id, rows, *, batches: int):
    events = [
        {
            "event_id": str(uuid.uuid4()),
            "grant": grant,
            "allocation_id": str(allocation_id),
            "tenant_id": str(tenant_id),
            "sku": "h100-sxm-8x",
            "start": rfc(ORIGIN + timedelta(seconds=start)),
            "end": rfc(ORIGIN + timedelta(seconds=start + length)),
            "quantity": str(GPUS * length * percent // 100),
            "unit": "gpu_second",
        }
        for start, length, percent in rows
    ]
    size = -(-len(events) // batches)
    accepted = []
    for lo in range(0, len(events), size):
        batch = events[lo : lo + size]
        result = ingest_meter_events(node_id=node_id, events=batch, received_at=ORIGIN + timedelta(hours=3))
        refused = {r.event_id for r in result.rejected}
        assert {r.code for r in result.rejected} <= {"exceeds_interval_capacity"}
        accepted += [
            (start, start + length, GPUS * length * percent // 100)
            for (start, length, percent), e in zip(rows[lo : lo + size], batch, strict=True)
            if e["event_id"] not in refused
        ]
    return accepted


@settings(
    max_examples=60,
    deadline=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(rows=INTERVALS, batches=st.integers(1, 3))
def test_random_overlapping_intervals_never_bill_more_than_gpus_times_their_union(db, rows, batches):
    node_id, tenant_id, allocation_id = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    grant = _grant(node_id, tenant_id, allocation_id)
    accepted = _send(node_id, grant, tenant_id, allocation_id, rows, batches=batches)
    billed = sum(UsageEvent.objects.using("ledger").filter(node_id=node_id).values_list("quantity_micro", flat=True))
    assert billed == sum(q for _, _, q in accepted) * 10**6
    assert billed <= GPUS * _union_seconds([(a, b) for a, b, _ in accepted]) * 10**6
    assert billed <= GPUS * _union_seconds([(s, s + n) for s, n, _ in rows]) * 10**6
    assert _peak_gpus(accepted) <= GPUS + 1e-9
    # the first event, alone on its node so far and within its grant, is always charged
    first_start, first_length, first_percent = rows[0]
    assert (first_start, first_start + first_length, GPUS * first_length * first_percent // 100) in accepted


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=INTERVALS)
def test_intervals_that_do_not_overlap_are_all_charged(db, rows):
    """Metamorphic: the same events moved apart (each after the previous one ends) are all charged."""
    node_id, tenant_id, allocation_id = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    grant = _grant(node_id, tenant_id, allocation_id)
    apart, at = [], 0
    for _start, length, percent in rows:
        apart.append((at, length, percent))
        at += length
    accepted = _send(node_id, grant, tenant_id, allocation_id, apart, batches=1)
    assert len(accepted) == len(apart)


def test_each_node_is_bounded_on_its_own(db):
    """Two nodes (two grants) metering the same minute are both charged: the bound is per node."""
    tenant_id, allocation_id = uuid.uuid4(), uuid.uuid4()
    for _ in range(2):
        node_id = uuid.uuid4()
        grant = _grant(node_id, tenant_id, allocation_id)
        assert len(_send(node_id, grant, tenant_id, allocation_id, [(0, 60, 100)], batches=1)) == 1


# ---- numbers no column holds: 400, the batch kept by the agent, never a 500 --------------------


@pytest.mark.parametrize(
    "quantity",
    ["1e30", "1E+999999999", "9" * 5000, "NaN", "Infinity", "-1", "1e-9", "0x10", "", " ", "4.8e2.1"],
)
def test_quantities_out_of_bounds_are_a_400_that_names_the_event_and_stores_nothing(rented, quantity):
    good, bad = _event(rented), _event(rented, quantity=quantity)
    response = rented["agent"].post(METER, {"events": [good, bad]}, format="json")
    assert response.status_code == 400, response.content
    assert response["Content-Type"].startswith("application/problem+json")
    assert [e["field"] for e in response.json()["errors"]] == ["events[1].quantity"]
    assert UsageEvent.objects.count() == 0
    # the agent bisects a 400 down to the bad event and parks it; the good one goes through
    assert _post(rented, good)["accepted"] == 1


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    quantity=st.one_of(
        st.text(max_size=60),
        st.integers(min_value=-(10**40), max_value=10**40).map(str),
        st.decimals(allow_nan=True, allow_infinity=True).map(str),
        st.floats().map(repr),
        st.integers(),
        st.floats(allow_nan=False, allow_infinity=False),  # JSON has no NaN or Infinity; their text is above
        st.none(),
    ),
    seconds=st.integers(-10, 10**9),
)
def test_no_quantity_or_interval_is_a_500(rented, quantity, seconds):
    start = datetime.now(UTC) - timedelta(minutes=10)
    try:
        end = rfc(start + timedelta(seconds=seconds))
    except OverflowError:
        end = "9999-12-31T23:59:59Z"
    event = {**_event(rented), "quantity": quantity, "end": end}
    response = rented["agent"].post(METER, {"events": [event]}, format="json")
    assert response.status_code in (202, 400), response.content


# ---- another node's event id, usage before the allocation, a flood of refusals -----------------


def test_another_nodes_event_id_in_a_batch_refuses_that_event_only(rented):
    own = _event(rented)
    assert _post(rented, own)["accepted"] == 1
    other = APIClient()
    other.credentials(HTTP_AUTHORIZATION=f"Bearer {mint_agent_token(rented['other_node'].pk)}")
    other_grant = sign_grant(
        MeteringGrant(
            node_id=rented["other_node"].pk,
            tenant_id=rented["acme"].pk,
            allocation_id=rented["allocation"].pk,
            sku=rented["grant"]["sku"],
            gpus=8,
            valid_from=rented["started"],
            valid_until=datetime.now(UTC) + timedelta(hours=1),
        )
    )
    taken = {**_event(rented, grant=other_grant), "event_id": own["event_id"]}
    fresh = _event(rented, grant=other_grant)
    response = other.post(METER, {"events": [taken, fresh]}, format="json")
    assert response.status_code == 202, response.content
    body = response.json()
    assert body["accepted"] == 1
    assert [(r["event_id"], r["code"]) for r in body["rejected"]] == [(own["event_id"], "event_id_in_use")]
    assert UsageEvent.objects.get(event_id=own["event_id"]).node_id == rented["node"].pk


def test_usage_from_before_the_allocation_started_is_held_not_billed(rented):
    from billing.services.runs import run_billing

    started = rented["started"].replace(microsecond=0)
    early = {
        **_event(rented),
        "start": rfc(started - timedelta(seconds=120)),
        "end": rfc(started - timedelta(seconds=60)),
    }
    straddling = {
        **_event(rented),
        "start": rfc(started - timedelta(seconds=30)),
        "end": rfc(started + timedelta(seconds=30)),
    }
    inside = {
        **_event(rented),
        "start": rfc(started + timedelta(minutes=5)),
        "end": rfc(started + timedelta(minutes=6)),
    }
    body = _post(rented, early, straddling, inside)
    assert (body["accepted"], body["rejected"]) == (3, [])
    held = UsageDispute.objects.filter(status="open")
    assert {d.usage_event.event_id for d in held} == {early["event_id"], straddling["event_id"]}
    assert "before this node joined the allocation" in held.first().reason
    run_billing(period=datetime.now(UTC).date().replace(day=1), finalize=False, actor="test")
    from billing.models import Invoice

    line = Invoice.objects.get(tenant_id=rented["acme"].pk).lines.get()
    assert line.quantity_micro == 480 * 10**6  # only the minute inside the allocation


def test_a_flood_of_refused_events_is_counted_and_only_sampled(rented, settings):
    settings.METER_REJECTED_SAMPLE_PER_NODE_HOUR = 50
    for _ in range(5):
        batch = [_event(rented, quantity="481") for _ in range(1000)]  # each over 8 GPUs × 60 s
        assert _post(rented, *batch)["accepted"] == 0
    assert RejectedMeterEvent.objects.count() == 50
    tally = RejectedMeterTally.objects.get(node_id=rented["node"].pk, code="quantity_exceeds_grant")
    assert (tally.refused, tally.sampled) == (5000, 50)
    assert tally.quantity_micro == 5000 * 481 * 10**6
    assert tally.last_event_id == batch[-1]["event_id"]


def test_operators_see_the_counted_refusals(rented, operator_client, settings):
    settings.METER_REJECTED_SAMPLE_PER_NODE_HOUR = 2
    _post(rented, *[_event(rented, quantity="481") for _ in range(5)])
    page = operator_client.get("/billing/disputes/").content.decode()
    assert 'id="refusal-tallies"' in page and "quantity_exceeds_grant" in page
    assert RejectedMeterEvent.objects.count() == 2
