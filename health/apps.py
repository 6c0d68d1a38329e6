from django.apps import AppConfig


class HealthConfig(AppConfig):
    name = "health"
    verbose_name = "Health"

    def ready(self):
        from . import search  # noqa: F401  registers the app's identifiers with core.search
