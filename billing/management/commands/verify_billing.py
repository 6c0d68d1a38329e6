"""Recompute every live invoice and credit note from the ledger's rows (billing.verifier)."""

from django.core.management.base import BaseCommand, CommandError

from billing.verification import run_verification


class Command(BaseCommand):
    help = (
        "Recompute every live invoice and credit note from raw ledger rows with the rules of "
        "docs/billing.md; print each difference. Exit status 1 when there is any."
    )

    def add_arguments(self, parser):
        parser.add_argument("--tenant", action="append", default=None, help="only this tenant id (repeatable)")
        parser.add_argument("--no-record", action="store_true", help="do not keep the result for the console page")
        parser.add_argument("--actor", default="cli:verify_billing")

    def handle(self, *args, tenant=None, no_record=False, actor="cli:verify_billing", **options):
        report, _ = run_verification(actor=actor, tenant_ids=tenant, record=not no_record)
        for difference in report.differences:
            self.stdout.write(f"DIFFERENCE {difference}")
        summary = (
            f"{report.invoices} live invoices, {report.credit_notes} credit notes, {report.runs} billing runs, "
            f"{report.usage_rows} usage rows read in {report.seconds:.2f} s: "
        )
        if report.ok:
            self.stdout.write(summary + "every invoice recomputes exactly; every usage row is billed once.")
            return
        raise CommandError(summary + f"{len(report.differences)} differences.", returncode=1)
