"""One clock: the wall clock (Django's, so frozen-time tests still work) unless a block runs on
a simulated clock, which then holds for the services the twin replays, and only there."""

import threading
from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone
from hypothesis import given
from hypothesis import strategies as st

from core import clock
from core.clock import ClockError, SimulatedClock

T0 = datetime(2027, 1, 1, tzinfo=UTC)


def test_the_live_clock_is_djangos(monkeypatch):
    frozen = datetime(2026, 3, 4, 5, 6, tzinfo=UTC)
    monkeypatch.setattr(timezone, "now", lambda: frozen)
    assert clock.now() == frozen and not clock.is_simulated()


def test_a_simulated_block_moves_only_when_told_and_ends_with_its_block():
    sim = SimulatedClock(T0)
    with clock.simulated(sim):
        assert clock.now() == T0 and clock.is_simulated()
        sim.advance_to(T0 + timedelta(days=200))
        assert clock.now() == T0 + timedelta(days=200)
        seen = []
        other = threading.Thread(target=lambda: seen.append(clock.now()))
        other.start()
        other.join()
        assert seen[0] < T0  # another thread (a live request, a worker) keeps the wall clock
    assert clock.now() < T0 and not clock.is_simulated()


def test_nested_blocks_restore_the_outer_clock():
    outer, inner = SimulatedClock(T0), SimulatedClock(T0 + timedelta(days=1))
    with clock.simulated(outer):
        with clock.simulated(inner):
            assert clock.now() == T0 + timedelta(days=1)
        assert clock.now() == T0


@given(st.lists(st.integers(min_value=-(10**6), max_value=10**6), min_size=1, max_size=20))
def test_time_never_runs_backwards(steps):
    sim = SimulatedClock(T0)
    for step in steps:
        target = sim.now() + timedelta(seconds=step)
        if step < 0:
            with pytest.raises(ClockError):
                sim.advance_to(target)
        else:
            sim.advance_to(target)
        assert sim.now() >= T0


def test_a_naive_start_is_refused():
    with pytest.raises(ClockError):
        SimulatedClock(datetime(2027, 1, 1))


@pytest.mark.django_db
def test_a_lifecycle_move_inside_a_twin_is_stamped_with_the_simulated_time(small_fleet):
    from fleet.choices import Lifecycle
    from fleet.models import Node
    from fleet.services.lifecycle import transition

    node = Node.objects.filter(lifecycle=Lifecycle.AVAILABLE).first()
    with clock.simulated(SimulatedClock(T0 + timedelta(days=3))):
        transition(node, Lifecycle.PROVISIONING, actor="test", action="place")
    node.refresh_from_db()
    assert node.state_entered_at == T0 + timedelta(days=3)
