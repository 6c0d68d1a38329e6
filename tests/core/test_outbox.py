"""The notification outbox as a mechanism: events only for committed changes, one event per
dedup key, retries with exponential backoff up to the dead letter, a claimed delivery never sent
twice, replays identical."""

from datetime import UTC, datetime, timedelta

import pytest
from django.db import transaction
from hypothesis import given, settings
from hypothesis import strategies as st

from core.choices import DeliveryState
from core.models import OutboxDelivery, OutboxEvent
from core.outbox import (
    DeliveryFailed,
    Sent,
    attempt_delivery,
    backoff,
    deliver_due,
    emit,
    register_channel,
    register_router,
    replay_delivery,
)

pytestmark = pytest.mark.django_db
NOW = datetime(2026, 12, 5, 12, tzinfo=UTC)
SENT: list[tuple[str, str]] = []
FAIL: dict[str, str] = {}  # target → "retry" | "permanent"


def _send(delivery, event):
    mode = FAIL.get(delivery.target)
    if mode == "retry":
        raise DeliveryFailed("receiver down", status_code=503)
    if mode == "permanent":
        raise DeliveryFailed("no such endpoint", status_code=410, permanent=True)
    if mode == "crash":
        raise ConnectionResetError("peer reset")
    SENT.append((str(event.pk), delivery.target))
    return Sent(200, "ok")


def _route(event):
    return [("test-recorder", t) for t in event.payload.get("to", [])] if event.audience == "test" else []


register_channel("test-recorder", _send)
register_router(_route)


@pytest.fixture(autouse=True)
def _clean():
    SENT.clear()
    FAIL.clear()


class Boom(Exception):
    pass


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("abcde"), st.booleans()), min_size=1, max_size=8))
def test_only_committed_changes_have_events_and_each_dedup_key_is_one_event(history):
    """Random histories of changes, each emitting in its transaction, some rolled back."""
    OutboxEvent.objects.all().delete()
    committed = set()
    for key, rolls_back in history:
        try:
            with transaction.atomic():
                emit(topic="thing.changed", dedup_key=key, payload={"to": ["t1"]}, audience="test", now=NOW)
                if rolls_back:
                    raise Boom
            committed.add(key)
        except Boom:
            pass
    assert set(OutboxEvent.objects.values_list("dedup_key", flat=True)) == committed
    assert OutboxDelivery.objects.count() == len(committed)  # one destination each, never twice


@settings(max_examples=30, deadline=None)
@given(st.integers(min_value=1, max_value=40))
def test_backoff_doubles_from_the_base_up_to_the_cap(attempts):
    assert backoff(1) == timedelta(seconds=30)
    assert backoff(attempts + 1) >= backoff(attempts)
    assert backoff(attempts) <= timedelta(hours=1)
    assert backoff(attempts) == timedelta(seconds=min(30 * 2 ** (attempts - 1), 3600))


def test_retries_then_dead_letter_then_replay(settings):
    settings.NOTIFY_MAX_ATTEMPTS = 3
    FAIL["t1"] = "crash"  # a network error the sender did not expect counts as a retryable failure
    event = emit(topic="thing.changed", dedup_key="k1", payload={"to": ["t1", "t2"]}, audience="test", now=NOW)
    assert deliver_due(now=NOW) == {"delivered": 1, "retrying": 1, "dead": 0}
    failing = OutboxDelivery.objects.get(target="t1")
    assert failing.next_attempt_at == NOW + timedelta(seconds=30) and "ConnectionResetError" in failing.last_error
    deliver_due(now=NOW + timedelta(seconds=30))
    deliver_due(now=NOW + timedelta(seconds=90))
    failing.refresh_from_db()
    assert failing.state == DeliveryState.DEAD and failing.attempts == 3
    assert [a.ok for a in failing.attempt_log.all()] == [False, False, False]
    delivered = OutboxDelivery.objects.get(target="t2")
    replay = replay_delivery(delivered, actor="user:op", now=NOW + timedelta(minutes=5))
    deliver_due(now=NOW + timedelta(minutes=5))
    replay.refresh_from_db()
    assert replay.state == DeliveryState.DELIVERED and SENT == [(str(event.pk), "t2"), (str(event.pk), "t2")]


def test_a_permanent_refusal_is_dead_at_once():
    FAIL["gone"] = "permanent"
    emit(topic="thing.changed", dedup_key="k2", payload={"to": ["gone"]}, audience="test", now=NOW)
    assert deliver_due(now=NOW)["dead"] == 1


def test_a_claimed_delivery_is_not_sent_by_a_second_worker():
    emit(topic="thing.changed", dedup_key="k3", payload={"to": ["t1"]}, audience="test", now=NOW)
    delivery = OutboxDelivery.objects.get()
    assert attempt_delivery(delivery.pk, now=NOW) == "delivered"
    assert attempt_delivery(delivery.pk, now=NOW) is None  # delivered: nothing to claim
    assert SENT == [(str(delivery.event_id), "t1")]


def test_an_event_nobody_listens_to_is_kept_without_deliveries():
    emit(topic="thing.changed", dedup_key="k4", payload={"to": []}, audience="test", now=NOW)
    assert OutboxEvent.objects.filter(dedup_key="k4").exists() and not OutboxDelivery.objects.exists()
