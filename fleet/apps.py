from django.apps import AppConfig


class FleetConfig(AppConfig):
    name = "fleet"
    verbose_name = "Fleet"

    def ready(self):
        from fleet.services import eol_actions  # noqa: F401  (registers sanitize, retire, dispose)
