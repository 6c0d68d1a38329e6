"""`manage.py isolation_audit`: check live tenancy state; exit 1 on any violation."""

import sys

from django.core.management.base import BaseCommand

from tenants.services.isolation_audit import find_violations


class Command(BaseCommand):
    help = "Check compute, fabric and storage isolation in the live state; exits non-zero on any violation."

    def handle(self, *args, **options):
        problems = find_violations()
        for problem in problems:
            self.stdout.write(f"VIOLATION: {problem}")
        if problems:
            self.stdout.write(f"{len(problems)} isolation violation(s)")
            sys.exit(1)
        self.stdout.write("no isolation violations")
