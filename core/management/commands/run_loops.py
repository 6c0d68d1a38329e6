"""Run the control loops without Celery: `--once` for one pass of each, else forever."""
import time

from django.core.management.base import BaseCommand
from django.utils.module_loading import import_string

from core.loops import LOOPS


class Command(BaseCommand):
    help = "Run one pass of every control loop (--once), or run them forever at their intervals."

    def add_arguments(self, parser):
        parser.add_argument("--once", action="store_true", help="one pass of every loop, then exit")

    def handle(self, *args, once: bool = False, **options):
        due = {name: 0.0 for name, _, _ in LOOPS}
        while True:
            for name, dotted, every in LOOPS:
                if not once and time.monotonic() < due[name]:
                    continue
                result = import_string(dotted)()
                self.stdout.write(f"{name}: {result}")
                due[name] = time.monotonic() + every
            if once:
                return
            time.sleep(1)
