"""Fault points: named places where the fault suite (`make chaos`) kills the process.

Inactive unless the HANGAR_FAULT_POINTS environment variable names them, e.g.
    HANGAR_FAULT_POINTS="idempotency.after_perform=exit,billing.after_draft=exit-once:var/chaos/fired"
Actions: `exit` ends the process at once (os._exit, as kill -9 would: no cleanup, no commit);
`exit-once:PATH` does so only if PATH does not exist yet (and creates it), so the retried run
goes through; `raise` raises SimulatedCrash (a BaseException: nothing catches it, every open
transaction rolls back) for in-process tests.
"""

import os
from pathlib import Path

from django.conf import settings


class SimulatedCrash(BaseException):
    """The process 'died' here (fault point with action `raise`)."""


def parse_fault_points(text: str) -> dict[str, str]:
    points = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, _, action = item.partition("=")
        points[name.strip()] = action.strip() or "exit"
    return points


def fault_point(name: str) -> None:
    action = settings.FAULT_POINTS.get(name)
    if not action:
        return
    if action == "raise":
        raise SimulatedCrash(name)
    if action.startswith("exit-once:"):
        marker = Path(action.removeprefix("exit-once:"))
        if marker.exists():
            return
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(name)
    os._exit(137)
