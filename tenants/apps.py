from django.apps import AppConfig


class TenantsConfig(AppConfig):
    name = "tenants"
    verbose_name = "Tenants"

    def ready(self):
        from core.problem_types import register_app

        register_app(self)  # tenants/problems.csv: the problem codes this app raises
        from . import search  # noqa: F401  registers the app's identifiers with core.search
