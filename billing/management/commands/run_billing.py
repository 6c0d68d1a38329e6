"""`manage.py run_billing --period YYYY-MM [--finalize]` (docs/api.md)."""

from django.core.management.base import BaseCommand, CommandError

from billing.periods import format_period, parse_period
from billing.services.runs import BillingRunError, run_billing


class Command(BaseCommand):
    help = "Rate a month into draft invoices; --finalize finalizes them (past months only)."

    def add_arguments(self, parser):
        parser.add_argument("--period", required=True, help="YYYY-MM")
        parser.add_argument("--finalize", action="store_true")

    def handle(self, *args, period, finalize, **options):
        try:
            month = parse_period(period)
            outcome = run_billing(period=month, finalize=finalize, actor="system:run_billing")
        except (ValueError, BillingRunError) as exc:
            raise CommandError(str(exc)) from None
        run = outcome.run
        verb = "rated" if outcome.created else "already finalized; unchanged"
        self.stdout.write(
            f"{format_period(month)} {verb}: {run.invoices} invoice(s), "
            f"{'finalized' if run.finalize else 'draft'}, price book v{run.price_book_version}, "
            f"watermark {run.watermark}, output {run.output_hash}"
        )
