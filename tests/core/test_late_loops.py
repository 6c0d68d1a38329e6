"""A loop is late only when its next due time plus a grace has passed without a pass; the first
due time counts from when the scheduler started. One rule on the overview and /metrics."""

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from core.beat import SingleBeatScheduler
from core.loop_metrics import EPOCH, grace_seconds, interval_seconds, loop_label, loop_statuses, record_loop_run
from core.models import BeatLease, LoopRun
from core.periodic import PERIODIC_TASKS
from core.services.beat_lease import hold_beat_lease

pytestmark = pytest.mark.django_db


def _start_beat(monkeypatch) -> None:
    """What `make demo`'s beat process does first: take the single-beat lease on its first tick."""
    monkeypatch.setattr("django_celery_beat.schedulers.DatabaseScheduler.tick", lambda self, *a, **k: 1)
    scheduler = SingleBeatScheduler.__new__(SingleBeatScheduler)
    scheduler.holder, scheduler._leading = "demo-host:4242", None
    scheduler.tick()


def _metrics(ops_api) -> dict:
    body = ops_api.get("/metrics", HTTP_ACCEPT="text/plain;version=0.0.4").content.decode()
    return {
        f.name: {tuple(s.labels.values()): s.value for s in f.samples} for f in text_string_to_metric_families(body)
    }


def test_a_freshly_started_demo_shows_no_late_loop(monkeypatch, operator_client, ops_api):
    _start_beat(monkeypatch)
    html = operator_client.get("/").content.decode()
    tile = html[html.rindex("<a", 0, html.index('id="tile-loops"')) : html.index("</a>", html.index('id="tile-loops"'))]
    assert '<div class="value">0</div>' in tile and "all on time" in tile
    assert "first due in" in html  # the loops table says when each is first due, not "late"
    families = _metrics(ops_api)
    assert set(families["hangar_loop_late"].values()) == {0.0}
    started = BeatLease.objects.get().started_at
    assert families["hangar_scheduler_started_timestamp_seconds"][()] == pytest.approx(started.timestamp())
    due = families["hangar_loop_next_due_timestamp_seconds"]
    assert due[("purge_idempotency_keys",)] == pytest.approx((started + timedelta(days=1)).timestamp())
    # two minutes later (the report said 5 late): the minute loops have run, and the
    # 5-minute, hourly and daily ones are not yet due, so nothing is late
    later = started + timedelta(minutes=2)
    for spec in PERIODIC_TASKS:
        if interval_seconds(spec) <= 60:
            record_loop_run(loop_label(spec.task), seconds=0.1, finished_at=later - timedelta(seconds=5))
    assert not [s.name for s in loop_statuses(later) if s.late]
    # and a worker that never picks anything up shows within a minute and a half
    assert {s.name for s in loop_statuses(later + timedelta(seconds=90)) if s.late} >= {"allocation_loop"}


def test_late_only_after_due_plus_grace(monkeypatch, ops_api):
    start = timezone.now() - timedelta(minutes=5)
    hold_beat_lease(holder="beat:1", now=start)
    # the 10 s allocation loop never ran since the start: due at start + 10 s, late after + 60 s
    status = {s.name: s for s in loop_statuses(start + timedelta(seconds=69))}["allocation_loop"]
    assert not status.late and status.lag_s == pytest.approx(59)
    status = {s.name: s for s in loop_statuses(start + timedelta(seconds=71))}["allocation_loop"]
    assert status.late
    # it ran: due again one interval after that pass
    record_loop_run("allocation_loop", seconds=0.1, finished_at=start + timedelta(seconds=80))
    status = {s.name: s for s in loop_statuses(start + timedelta(seconds=100))}["allocation_loop"]
    assert not status.late and status.due_at == start + timedelta(seconds=90)
    # the daily purge is late an hour after its first day, not three days
    daily = {s.name: s for s in loop_statuses(start + timedelta(days=1, minutes=59))}["purge_idempotency_keys"]
    assert not daily.late
    daily = {s.name: s for s in loop_statuses(start + timedelta(days=1, minutes=61))}["purge_idempotency_keys"]
    assert daily.late
    # every late loop on the overview is late on /metrics (the scrape is now: five minutes in)
    late_now = {s.name for s in loop_statuses(timezone.now()) if s.late}
    assert late_now and {name for (name,), v in _metrics(ops_api)["hangar_loop_late"].items() if v} == late_now


def test_a_restarted_scheduler_counts_a_long_ago_pass_from_its_start():
    long_ago = timezone.now() - timedelta(days=3)
    record_loop_run("reconcile_nodes", seconds=0.1, finished_at=long_ago)
    now = timezone.now()
    hold_beat_lease(holder="beat:new", now=now)
    status = {s.name: s for s in loop_statuses(now + timedelta(seconds=5))}["reconcile_nodes"]
    assert not status.late and status.due_at == now + timedelta(seconds=10)


def test_without_any_scheduler_every_loop_that_never_ran_is_late():
    statuses = loop_statuses(timezone.now())
    assert all(s.late and s.due_at == EPOCH for s in statuses)
    assert len(statuses) == len(PERIODIC_TASKS)


def test_a_renewal_keeps_the_start_and_a_takeover_moves_it():
    now = timezone.now()
    hold_beat_lease(holder="a:1", now=now)
    hold_beat_lease(holder="a:1", now=now + timedelta(seconds=5))
    assert BeatLease.objects.get().started_at == now
    hold_beat_lease(holder="b:2", now=now + timedelta(minutes=5))  # a's lease went stale: b starts
    assert BeatLease.objects.get().started_at == now + timedelta(minutes=5)


BASE = datetime(2026, 12, 1, tzinfo=UTC)
offsets = st.integers(min_value=0, max_value=3 * 86400)


@settings(max_examples=60, deadline=None)
@given(
    spec=st.sampled_from(PERIODIC_TASKS),
    start=offsets,
    last=st.one_of(st.none(), offsets),
    now=offsets,
    later=st.integers(min_value=0, max_value=86400),
)
def test_the_rule_against_a_brute_force_oracle(spec, start, last, now, later):
    """Oracle: the rule as docs/notifications.md states it, checked at random moments;
    metamorphic: a later look never turns late into on time, and a pass now is never late."""
    BeatLease.objects.all().delete()
    LoopRun.objects.all().delete()
    name, interval = loop_label(spec.task), interval_seconds(spec)
    hold_beat_lease(holder="beat:1", now=BASE + timedelta(seconds=start))
    if last is not None:
        record_loop_run(name, seconds=0.1, finished_at=BASE + timedelta(seconds=last))
    anchor = max(start, last if last is not None else start)
    moment = BASE + timedelta(seconds=now)

    def late_at(t):
        return {s.name: s for s in loop_statuses(t)}[name].late

    expected = (now - (anchor + interval)) > min(max(2 * interval, 60), 3600)
    assert late_at(moment) == expected
    assert grace_seconds(interval) == min(max(2 * interval, 60), 3600)
    if late_at(moment):
        assert late_at(moment + timedelta(seconds=later))
    record_loop_run(name, seconds=0.1, finished_at=moment)
    assert not late_at(moment)
