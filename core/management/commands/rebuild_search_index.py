"""Rewrite the console search's index from the source tables (docs/search.md)."""

import time

from django.apps import apps
from django.core.management.base import BaseCommand, CommandError

from core.search import MODELS, rebuild


class Command(BaseCommand):
    help = "Rewrite the search index (core.SearchEntry) from every registered model, or only those named."

    def add_arguments(self, parser):
        parser.add_argument(
            "models", nargs="*", metavar="app_label.Model", help="only these models (e.g. fleet.GPU); default: all"
        )

    def handle(self, *args, models=(), **options):
        chosen = []
        for label in models:
            try:
                model = apps.get_model(label)
            except (LookupError, ValueError):
                raise CommandError(f"{label} is not a model; name it as app_label.Model, e.g. fleet.GPU") from None
            if model not in MODELS:
                names = ", ".join(sorted(m._meta.label for m in MODELS))
                raise CommandError(f"{label} is not searchable; the searchable models are {names}")
            chosen.append(model)
        started = time.monotonic()
        counts = rebuild(chosen or None)
        for kind, count in counts.items():
            self.stdout.write(f"{kind}: {count}")
        self.stdout.write(f"{sum(counts.values())} entries in {time.monotonic() - started:.1f} s")
