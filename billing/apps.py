from django.apps import AppConfig


class BillingConfig(AppConfig):
    name = "billing"
    verbose_name = "Billing"

    def ready(self):
        from . import search  # noqa: F401  registers the app's identifiers with core.search
