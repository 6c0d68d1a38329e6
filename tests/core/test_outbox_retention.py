"""Outbox retention: delivered events are purged after NOTIFY_RETENTION_DAYS, dead-lettered ones
after NOTIFY_DEAD_RETENTION_DAYS (or kept once retried), pending ones never; batched; audited as
counts; shown on the Notifications page."""

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.choices import DeliveryState
from core.loops import LOOPS
from core.models import AuditEvent, DeliveryAttempt, OutboxDelivery, OutboxEvent
from core.outbox import (
    DeliveryFailed,
    Sent,
    deliver_due,
    emit,
    purge_expired,
    register_channel,
    register_router,
    replay_delivery,
    retry_delivery,
)
from core.periodic import PERIODIC_TASKS

pytestmark = pytest.mark.django_db
NOW = datetime(2026, 12, 5, 12, tzinfo=UTC)
FAILING: set[str] = set()


def _send(delivery, event):
    if delivery.target in FAILING:
        raise DeliveryFailed("gone", status_code=410, permanent=True)
    return Sent(200, "ok")


register_channel("test-retention", _send)
register_router(
    lambda event: [("test-retention", t) for t in event.payload.get("to", [])] if event.audience == "retention" else []
)


@pytest.fixture(autouse=True)
def _clean():
    FAILING.clear()


def _event(key: str, *, age_days: float, targets=("ok",)) -> OutboxEvent:
    at = NOW - timedelta(days=age_days)
    event = emit(topic="thing.changed", dedup_key=key, payload={"to": list(targets)}, audience="retention", now=at)
    deliver_due(now=at)
    return event


def test_a_delivered_event_is_purged_after_the_retention_with_its_log_and_audited_as_counts():
    old = _event("old", age_days=31)
    young = _event("young", age_days=29)
    assert DeliveryAttempt.objects.filter(delivery__event=old).count() == 1
    assert purge_expired(now=NOW) == {"events": 1, "deliveries": 1, "attempts": 1}
    assert set(OutboxEvent.objects.values_list("dedup_key", flat=True)) == {"young"}
    assert not OutboxDelivery.objects.filter(event_id=old.pk).exists()
    assert OutboxDelivery.objects.filter(event=young).count() == 1
    audit = AuditEvent.objects.get(action="outbox.purge")
    assert audit.actor == "system:retention"
    assert audit.after == {"events": 1, "deliveries": 1, "attempts": 1, "retention_days": 30, "dead_retention_days": 90}
    assert purge_expired(now=NOW) == {"events": 0, "deliveries": 0, "attempts": 0}
    assert AuditEvent.objects.filter(action="outbox.purge").count() == 1  # nothing purged: no audit row


def test_dead_letters_are_kept_for_the_longer_retention_and_a_retried_one_until_it_went_out():
    FAILING.add("gone")
    dead = _event("dead", age_days=60, targets=("ok", "gone"))
    assert OutboxDelivery.objects.get(event=dead, target="gone").state == DeliveryState.DEAD
    assert purge_expired(now=NOW)["events"] == 0
    assert purge_expired(now=NOW + timedelta(days=31))["events"] == 1  # 91 days old: past the dead letters' 90

    retried = _event("retried", age_days=95, targets=("gone",))
    FAILING.clear()
    retry_delivery(OutboxDelivery.objects.get(event=retried), actor="user:op", now=NOW)
    assert purge_expired(now=NOW)["events"] == 0  # pending again: never purged
    deliver_due(now=NOW)
    assert purge_expired(now=NOW + timedelta(days=29))["events"] == 0  # delivered just now: a fresh retention
    assert purge_expired(now=NOW + timedelta(days=31))["events"] == 1


def test_a_recent_replay_keeps_its_old_event():
    event = _event("replayed", age_days=40)
    replay_delivery(OutboxDelivery.objects.get(event=event), actor="user:op", now=NOW - timedelta(days=1))
    deliver_due(now=NOW - timedelta(days=1))
    assert purge_expired(now=NOW)["events"] == 0
    assert purge_expired(now=NOW + timedelta(days=30)) == {"events": 1, "deliveries": 2, "attempts": 2}


def test_the_purge_is_batched_and_bounded_per_pass():
    for i in range(5):
        _event(f"e{i}", age_days=40 + i)
    assert purge_expired(now=NOW, batch=2, max_batches=1)["events"] == 2
    assert set(OutboxEvent.objects.values_list("dedup_key", flat=True)) == {"e0", "e1", "e2"}  # oldest went first
    assert purge_expired(now=NOW, batch=2, max_batches=5)["events"] == 3


def test_retention_runs_on_both_schedulers():
    assert any(spec.task == "core.tasks.purge_notifications" and spec.every_seconds for spec in PERIODIC_TASKS)
    assert ("core.tasks.purge_notifications", "core.outbox.purge_expired") in LOOPS


def test_the_notifications_page_says_how_long_events_are_kept(operator_client, settings):
    settings.NOTIFY_RETENTION_DAYS, settings.NOTIFY_DEAD_RETENTION_DAYS = 14, 60
    page = operator_client.get("/notifications/").content.decode()
    assert "kept 14 days" in page and "kept 60 days" in page


STATES = st.sampled_from(["delivered", "dead", "pending"])


@settings(max_examples=40, deadline=None)
@given(
    history=st.lists(
        st.tuples(st.integers(min_value=0, max_value=120), st.lists(STATES, min_size=1, max_size=2)),
        min_size=1,
        max_size=6,
    ),
    batch=st.integers(min_value=1, max_value=3),
)
def test_what_is_purged_is_what_the_rules_say_whatever_the_batch(history, batch):
    """Random events (age, delivery states); the oracle reads the documented rules one event at a
    time; batch sizes 1..3 purge the same set as one big batch, and a second pass purges nothing."""
    OutboxEvent.objects.all().delete()
    expected_kept = set()
    for i, (age, states) in enumerate(history):
        targets = [f"t{j}" for j in range(len(states))]
        at = NOW - timedelta(days=age)
        event = emit(topic="thing.changed", dedup_key=f"h{i}", payload={"to": targets}, audience="retention", now=at)
        for target, state in zip(targets, states):
            OutboxDelivery.objects.filter(event=event, target=target).update(
                state=state, delivered_at=at if state == "delivered" else None
            )
        purged = age > 30 and "pending" not in states and ("dead" not in states or age > 90)
        if not purged:
            expected_kept.add(f"h{i}")
    purge_expired(now=NOW, batch=batch, max_batches=100)
    assert set(OutboxEvent.objects.values_list("dedup_key", flat=True)) == expected_kept
    assert purge_expired(now=NOW, batch=batch)["events"] == 0
