"""Run the control loops without Celery (docs/api.md, "Management commands")."""

import os
import socket
import time

from django.core.management.base import BaseCommand
from django.utils import timezone
from django.utils.module_loading import import_string

from core.loop_metrics import record_loop_run
from core.loops import control_loops
from core.services.beat_lease import note_scheduler_start


def _summary(result) -> str:
    return str(result.as_dict() if hasattr(result, "as_dict") else result)


class Command(BaseCommand):
    help = "Run one pass of every control loop (--once), or run them forever at their intervals."

    def add_arguments(self, parser):
        parser.add_argument("--once", action="store_true", help="one pass of every loop, then exit")

    def handle(self, *args, once=False, **options):
        # Names and intervals of the Celery tasks: one metric series per loop, whichever runner ran it.
        loops = [(loop.name, import_string(loop.callable_path), loop.every_seconds) for loop in control_loops()]
        due = {name: 0.0 for name, _, _ in loops}
        if not once:  # a scheduler from now on: the loops' first due times count from here
            note_scheduler_start(holder=f"{socket.gethostname()}:{os.getpid()}", now=timezone.now())
        while True:
            for name, run, every in loops:
                if time.monotonic() < due[name]:
                    continue
                started = time.perf_counter()
                try:
                    result = run()
                except Exception:
                    record_loop_run(
                        name, seconds=time.perf_counter() - started, finished_at=timezone.now(), failed=True
                    )
                    raise
                record_loop_run(name, seconds=time.perf_counter() - started, finished_at=timezone.now())
                self.stdout.write(f"{name}: {_summary(result)}")
                due[name] = time.monotonic() + every
            if once:
                return
            time.sleep(max(0.1, min(due.values()) - time.monotonic()))
