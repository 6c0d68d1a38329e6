"""`manage.py archive_ledger_month` — list, archive, restore or drop a month of usage (docs/billing.md)."""

import getpass
import sys
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from billing.models import MICRO_PER_HOUR, Invoice
from billing.periods import format_period, parse_period
from billing.services.ledger_partitions import (
    ArchiveRefused,
    archive_month,
    drop_archived_month,
    ledger_months,
    month_figures,
    restore_month,
)
from core.formatting import format_bytes, format_count, format_gpu_hours

LEDGER = "ledger"


class Command(BaseCommand):
    help = (
        "Detach a closed month's usage partition into the ledger_archive schema (optionally exporting "
        "it as CSV), restore it, or drop it once exported. --list shows every month."
    )

    def add_arguments(self, parser):
        parser.add_argument("period", nargs="?", help="YYYY-MM")
        parser.add_argument("--list", action="store_true", help="every month: attached, archived or dropped")
        parser.add_argument("--export-dir", type=Path, help="also write usage-YYYY-MM.csv.gz here, hashed")
        parser.add_argument("--restore", action="store_true", help="attach an archived month again")
        parser.add_argument("--drop", action="store_true", help="drop an archived month whose export is on disk")
        parser.add_argument("--yes", action="store_true", help="do not ask (scripts)")
        parser.add_argument("--actor", default=f"cli:{getpass.getuser()}", help="who, for the audit trail")

    def handle(self, *args, period, list, export_dir, restore, drop, yes, actor, **options):
        if list:
            return self._list()
        if not period:
            raise CommandError("name a month (YYYY-MM), or --list")
        if restore and drop:
            raise CommandError("--restore or --drop, not both")
        try:
            month = parse_period(period)
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        try:
            if restore:
                self._confirm(yes, month, f"re-attach {format_period(month)} to the ledger")
                record = restore_month(month, actor=actor)
            elif drop:
                self._confirm(yes, month, f"DROP the archived table of {format_period(month)} (the export stays)")
                record = drop_archived_month(month, actor=actor)
            else:
                figures = month_figures(month)
                invoices = Invoice.objects.using(LEDGER).filter(period=month).count()
                self._confirm(
                    yes,
                    month,
                    f"detach {figures.partition}: {format_count(figures.rows)} usage rows, "
                    f"{format_gpu_hours(figures.quantity_micro / MICRO_PER_HOUR)}, ids "
                    f"{figures.first_id}–{figures.last_id}; its {invoices} invoice(s) keep their frozen lines",
                )
                record = archive_month(month, actor=actor, export_dir=export_dir)
        except ArchiveRefused as exc:
            raise CommandError(exc.detail) from None
        export = f", export {record.export_path} sha256 {record.export_sha256}" if record.export_sha256 else ""
        self.stdout.write(
            f"{format_period(month)} {record.action}: {record.rows} rows, {record.quantity_micro} GPU-µs, "
            f"at {record.location}{export}"
        )

    def _confirm(self, yes: bool, month, what: str) -> None:
        self.stdout.write(f"This will {what}.")
        if yes:
            return
        if not sys.stdin.isatty():
            raise CommandError("not a terminal: pass --yes to go on without asking")
        answer = input(f"Type {format_period(month)} to go on: ").strip()
        if answer != format_period(month):
            raise CommandError("not confirmed; nothing changed")

    def _list(self) -> None:
        months = ledger_months()
        if not months:
            self.stdout.write("The ledger is one table here (SQLite): no monthly partitions.")
            return
        for row in months:
            size = format_bytes(row["bytes"]) if row["bytes"] is not None else "–"
            rows = f", {format_count(row['rows'])} rows" if row["rows"] is not None else ""
            self.stdout.write(f"{format_period(row['period'])}  {row['state']:<8}  {size:>10}  {row['location']}{rows}")
