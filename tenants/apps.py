from django.apps import AppConfig


class TenantsConfig(AppConfig):
    name = "tenants"
    verbose_name = "Tenants"

    def ready(self):
        from core.problem_types import register_app

        from . import notifications, search  # noqa: F401  search registers the app's identifiers with core.search

        register_app(self)  # tenants/problems.csv: the problem codes this app raises
        notifications.register()  # tenant webhooks and e-mail: the router and channels (core.outbox)
