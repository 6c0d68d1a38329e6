"""Workers and beat: a killed task comes back within minutes, a second beat schedules nothing."""

from datetime import timedelta

import pytest
from celery import current_app
from django.conf import settings
from django.utils import timezone

from core.beat import SingleBeatScheduler
from core.models import BeatLease
from core.services.beat_lease import LEASE_TTL, hold_beat_lease

pytestmark = pytest.mark.django_db


def test_late_ack_and_a_visibility_timeout_just_above_the_longest_task():
    import config.celery  # noqa: F401  (registers the tasks)

    current_app.loader.import_default_modules()
    limits = {name: task.time_limit for name, task in current_app.tasks.items() if not name.startswith("celery.")}
    assert limits and all(limit is not None for limit in limits.values()), limits
    assert settings.CELERY_TASK_ACKS_LATE and settings.CELERY_TASK_REJECT_ON_WORKER_LOST
    assert max(limits.values()) == settings.CELERY_LONGEST_TASK_TIME_LIMIT_S
    # never redelivered while it may still run; retried within minutes once its worker is gone
    assert max(limits.values()) < settings.CELERY_VISIBILITY_TIMEOUT_S <= 600


def test_a_second_beat_refuses_to_schedule_until_the_first_goes_stale(ops_api):
    now = timezone.now()
    assert hold_beat_lease(holder="host-a:1", now=now)
    assert not hold_beat_lease(holder="host-b:2", now=now + timedelta(seconds=5))
    assert hold_beat_lease(holder="host-a:1", now=now + timedelta(seconds=10))  # renewals keep it
    assert not hold_beat_lease(holder="host-b:2", now=now + timedelta(seconds=15))
    assert BeatLease.objects.get().refused_ticks == 2
    # the holder is killed: the other takes over one TTL after its last renewal
    later = now + timedelta(seconds=10) + LEASE_TTL + timedelta(seconds=1)
    assert hold_beat_lease(holder="host-b:2", now=later)
    assert not hold_beat_lease(holder="host-a:1", now=later)
    metrics = ops_api.get("/metrics").content.decode()
    assert 'hangar_beat_lease_holder{holder="host-b:2"} 1.0' in metrics
    assert "hangar_beat_refused_ticks_total 3.0" in metrics


def test_the_scheduler_of_a_beat_without_the_lease_sends_nothing(monkeypatch):
    assert settings.CELERY_BEAT_SCHEDULER == "core.beat:SingleBeatScheduler"
    hold_beat_lease(holder="elsewhere:1", now=timezone.now())
    scheduler = SingleBeatScheduler.__new__(SingleBeatScheduler)  # no app/DB sync needed for tick()
    scheduler.holder, scheduler._leading = "here:2", None
    sent = []
    monkeypatch.setattr(
        "django_celery_beat.schedulers.DatabaseScheduler.tick", lambda self, *a, **k: sent.append(1) or 1
    )
    assert scheduler.tick() == 5.0 and sent == []
    BeatLease.objects.update(renewed_at=timezone.now() - LEASE_TTL - timedelta(seconds=1))
    assert scheduler.tick() == 1 and sent == [1]
