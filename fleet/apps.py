from django.apps import AppConfig


class FleetConfig(AppConfig):
    name = "fleet"
    verbose_name = "Fleet"

    def ready(self):
        from core.problem_types import register_app

        register_app(self)  # fleet/problems.csv: the problem codes this app raises
        from . import search  # noqa: F401  registers the app's identifiers with core.search
