from django.apps import AppConfig


class HealthConfig(AppConfig):
    name = "health"
    verbose_name = "Health"

    def ready(self):
        from core.problem_types import register_app

        register_app(self)  # health/problems.csv: the problem codes this app raises
        from . import search  # noqa: F401  registers the app's identifiers with core.search
