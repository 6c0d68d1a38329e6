"""`manage.py billing_reconcile --period YYYY-MM`: allocations with no metering and metering
with no allocation. Exit status 0 when the ledger and allocation history agree, 1 when gaps
were found (so cron/CI can alert), 2 for a bad argument or an archived month."""

from datetime import timedelta

from django.core.management.base import BaseCommand, CommandError

from billing.periods import format_period, parse_period
from billing.reconcile import PeriodArchived, reconcile


class Command(BaseCommand):
    help = "Compare ledger usage with allocation history for a month; exits 1 when gaps are found."

    def add_arguments(self, parser):
        parser.add_argument("--period", required=True, help="YYYY-MM")
        parser.add_argument(
            "--min-overlap-minutes",
            type=int,
            default=10,
            help="ignore memberships shorter than this in the period (default 10)",
        )

    def handle(self, *args, period, min_overlap_minutes, **options):
        try:
            month = parse_period(period)
        except ValueError as exc:
            raise CommandError(str(exc), returncode=2) from None
        try:
            report = reconcile(period=month, min_overlap=timedelta(minutes=min_overlap_minutes))
        except PeriodArchived as exc:
            raise CommandError(exc.detail, returncode=2) from None
        self.stdout.write(
            f"{format_period(month)}: {report.memberships} allocation membership(s), "
            f"{report.metered_pairs} metered allocation/node pair(s)"
        )
        for title, gaps in (
            ("allocations with no metering", report.unmetered),
            ("metering with no allocation", report.unallocated),
        ):
            self.stdout.write(f"{title}: {len(gaps)}")
            for gap in gaps:
                self.stdout.write(
                    f"  allocation {gap.allocation_id} node {gap.node_id} tenant {gap.tenant_id}: {gap.detail}"
                )
        if not report.ok:
            raise CommandError("gaps found; see above", returncode=1)
        self.stdout.write("no gaps")
