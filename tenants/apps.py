from django.apps import AppConfig


class TenantsConfig(AppConfig):
    name = "tenants"
    verbose_name = "Tenants"

    def ready(self):
        from . import search  # noqa: F401  registers the app's identifiers with core.search
