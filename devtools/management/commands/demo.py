"""`manage.py demo`: seed the demo (idempotent), then run web + worker + beat (+ the fleet
simulator when present) until Ctrl-C, printing the URL and logins."""

import importlib
import os
import signal
import subprocess
import sys
import time

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from devtools.demo import DEMO_OPERATOR, DEMO_SEED_STEPS, demo_processes


def _load(dotted: str):
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


class Command(BaseCommand):
    help = "Seed the demo fleet, tenants and history, then serve the console with the control loops running."

    def add_arguments(self, parser):
        parser.add_argument("--no-serve", action="store_true", help="seed only; do not start the processes")

    def handle(self, *args, no_serve=False, **options):
        if not settings.DEBUG:
            # The demo creates accounts whose passwords are printed in this repository (operator,
            # acme-admin, globex-admin / hangar-demo) and mints node tokens: never on a real database.
            raise CommandError(
                "manage.py demo refuses to run with DEBUG off: it creates accounts with published passwords. "
                "It is for a development machine (`make demo` sets DEBUG=true)."
            )
        self.stdout.write("Seeding the demo (skips what is already there)…")
        for step in DEMO_SEED_STEPS:
            self.stdout.write(f"- {step.rpartition('.')[2].replace('_', ' ')}")
            _load(step)(self.stdout)
        call_command("setup_periodic_tasks", stdout=self.stdout)
        if no_serve:
            return
        self._serve()

    def _serve(self):
        env = {
            **os.environ,
            "DEBUG": os.environ.get("DEBUG", "true"),
            "ACCESS_LOG_LEVEL": os.environ.get("ACCESS_LOG_LEVEL", "WARNING"),
        }
        children = []
        var = str(settings.VAR_DIR)
        try:
            speed = float(os.environ.get("HANGAR_DEMO_SPEED") or 0)
            processes = demo_processes(speed)
        except ValueError as exc:
            raise CommandError(f"HANGAR_DEMO_SPEED: {exc}") from None
        for label, argv in processes:
            argv = [a.replace("{var}", var) for a in argv]
            children.append((label, subprocess.Popen([sys.executable, *argv], env=env)))
        username, password = DEMO_OPERATOR
        self.stdout.write(
            self.style.SUCCESS(
                "\nHangar demo is running.\n"
                "  Console:  http://127.0.0.1:8000/\n"
                f"  Operator: {username} / {password}   (admin at http://127.0.0.1:8000/admin/)\n"
                "  Tenants:  acme-admin / hangar-demo, globex-admin / hangar-demo   (portal at /portal/)\n"
                "  API docs: http://127.0.0.1:8000/api/v1/docs/\n"
                "  BMCs:     Redfish emulator at http://127.0.0.1:8001/redfish/v1 (admin / redfish-emulator-password)\n"
                "  Pages:    http://127.0.0.1:8000/notifications/ (PagerDuty and webhooks go to a local sink on :8002)\n"
                f"  Processes: {', '.join(label for label, _ in children)}\n"
                "Press Ctrl-C to stop."
            )
        )
        stop = False

        def _stop(signum, frame):
            nonlocal stop
            stop = True

        signal.signal(signal.SIGTERM, _stop)
        try:
            while not stop:
                for label, proc in children:
                    if proc.poll() is not None:
                        self.stderr.write(f"{label} exited with {proc.returncode}; stopping the demo.")
                        stop = True
                time.sleep(1)
        except KeyboardInterrupt:
            pass
        finally:
            for _, proc in children:
                if proc.poll() is None:
                    proc.terminate()
            for _, proc in children:
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
