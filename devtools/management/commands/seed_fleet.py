"""`manage.py seed_fleet --gpus N`: build a realistic fleet (2048 for the demo, 100000 for scale)."""

import time

from django.core.management.base import BaseCommand, CommandError

from devtools.services.fleet_seed import seed_fleet
from fleet.models import Node, Site


class Command(BaseCommand):
    help = "Build a realistic fleet of N GPUs: H100 nodes in air-cooled racks, NDR pods, GPUs and drives."

    def add_arguments(self, parser):
        parser.add_argument("--gpus", type=int, required=True, help="number of GPUs (a multiple of 8)")
        parser.add_argument("--site", default="dc1", help="slug of the site to create (default dc1)")
        parser.add_argument("--seed", type=int, default=7, help="random seed for serials and ages")
        parser.add_argument("--if-empty", action="store_true", help="do nothing when the fleet already has nodes")

    def handle(self, *args, gpus, site, seed, if_empty, **options):
        existing = Node.objects.count()
        if existing and if_empty:
            self.stdout.write(f"Fleet already has {existing} nodes; nothing to seed.")
            return
        if Site.objects.filter(slug=site).exists():
            raise CommandError(
                f"Site {site!r} already exists. Pass --site with a new slug, or start from an empty database."
            )
        started = time.monotonic()
        try:
            result = seed_fleet(
                gpus=gpus, site_slug=site, seed=seed, progress=lambda message: self.stdout.write(f"  {message}")
            )
        except (ValueError, RuntimeError) as exc:
            raise CommandError(str(exc)) from exc
        elapsed = time.monotonic() - started
        self.stdout.write(
            self.style.SUCCESS(
                f"Seeded {result.gpus} GPUs in {result.nodes} nodes, {result.racks} racks, {result.halls} halls, "
                f"{result.fabric_domains} fabric domain(s), {result.drives} drives in {elapsed:.1f} s."
            )
        )
