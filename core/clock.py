"""One clock for the control plane: `now()`.

In the live system it is the wall clock — `django.utils.timezone.now()`, looked up at each call,
so tests that freeze or patch Django's clock keep working. The fleet twin (devtools.twin)
replays a simulated year through the same services and loops: it runs them inside
`simulated(clock)`, where `now()` answers the twin's `SimulatedClock`, which its event loop
moves from one event to the next (it jumps; nothing sleeps).

The override is a context variable: it holds for the code running inside the `with` block in
this thread (or task) only, never for another request, worker or thread of the live system.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime

from django.utils import timezone


class ClockError(ValueError):
    pass


class SimulatedClock:
    """A clock that stands still until told to move (forward only), UTC-aware."""

    def __init__(self, start: datetime) -> None:
        if start.tzinfo is None:
            raise ClockError("a simulated clock starts at a timezone-aware moment")
        self._now = start

    def now(self) -> datetime:
        return self._now

    def advance_to(self, moment: datetime) -> None:
        """Jump to `moment`; a moment in the past is refused (time never runs backwards)."""
        if moment < self._now:
            raise ClockError(f"the clock is at {self._now.isoformat()}; it cannot go back to {moment.isoformat()}")
        self._now = moment


_current: ContextVar[SimulatedClock | None] = ContextVar("hangar_clock", default=None)


def now() -> datetime:
    """The control plane's time: the simulated clock inside `simulated()`, else the wall clock."""
    clock = _current.get()
    return timezone.now() if clock is None else clock.now()


def is_simulated() -> bool:
    return _current.get() is not None


@contextmanager
def simulated(clock: SimulatedClock) -> Iterator[SimulatedClock]:
    """Run the block on `clock` (only this thread/context; nested blocks restore the outer one)."""
    token = _current.set(clock)
    try:
        yield clock
    finally:
        _current.reset(token)
