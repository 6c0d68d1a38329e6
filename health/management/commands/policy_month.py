"""`manage.py policy_month --seed N` — a simulated month of Xids at the Llama 3 rates, judged by
the health policy before and after the catalogue rules (docs/health-policy.md)."""

from django.core.management.base import BaseCommand

from core.formatting import format_count
from health import simulation

MAX_NODES = 100_000
MAX_DAYS = 366


class Command(BaseCommand):
    help = (
        "Simulate a month of Xids on H100 nodes at the Llama 3 rates (reliability.csv) and report false "
        "pulls and GPUs left in service that needed a reset, per 1,000 node-days, before and after."
    )

    def add_arguments(self, parser):
        parser.add_argument("--seed", type=int, default=1)
        parser.add_argument("--nodes", type=int, default=10_000, help=f"1 to {MAX_NODES}")
        parser.add_argument("--days", type=int, default=30, help=f"1 to {MAX_DAYS}")

    def handle(self, *args, seed, nodes, days, **options):
        from django.core.management.base import CommandError

        if not 1 <= nodes <= MAX_NODES or not 1 <= days <= MAX_DAYS:
            raise CommandError(f"--nodes 1..{MAX_NODES} and --days 1..{MAX_DAYS}")
        figures = simulation.month(seed=seed, nodes=nodes, days=days)
        self.stdout.write(
            f"seed {seed}: {format_count(nodes)} H100 nodes x {days} days = {format_count(int(figures.node_days))} "
            f"node-days; {figures.faults} interruptions drawn, {figures.xid_faults} with Xids (simulated; "
            "cause-to-Xid split assumed)"
        )
        self.stdout.write(f"{'per 1,000 node-days':<42}{'before':>10}{'after':>10}")
        for key, label in (
            ("pulls", "nodes pulled"),
            ("false_pulls", "false pulls (RESTART_APP / IGNORE / 154 None)"),
            ("left_needing_reset", "GPUs needing a reset left taking work"),
            ("deferred_resets", "resets deferred to release (tenant stays)"),
            ("operator_tasks", "operator tasks (hold)"),
        ):
            self.stdout.write(
                f"{label:<42}{figures.per_1000('before_' + key):>10.3f}{figures.per_1000('after_' + key):>10.3f}"
            )
