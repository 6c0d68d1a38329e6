"""`manage.py health_policy_docs` — write docs/health-policy.md's Xid table from the catalogue."""

from django.core.management.base import BaseCommand, CommandError

from health import policy_docs


class Command(BaseCommand):
    help = "Write the Xid table of docs/health-policy.md from core/reference/xid_catalog.csv and the overrides."

    def add_arguments(self, parser):
        parser.add_argument("--check", action="store_true", help="fail if the docs are not in step; write nothing")

    def handle(self, *args, check=False, **options):
        if check:
            if not policy_docs.in_step(policy_docs.DOC.read_text()):
                raise CommandError("docs/health-policy.md is not in step: run manage.py health_policy_docs")
            self.stdout.write("docs/health-policy.md is in step with the catalogue")
            return
        changed = policy_docs.write()
        self.stdout.write("docs/health-policy.md " + ("updated" if changed else "already in step"))
