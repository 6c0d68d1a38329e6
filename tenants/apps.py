from django.apps import AppConfig


class TenantsConfig(AppConfig):
    name = "tenants"
    verbose_name = "Tenants"

    def ready(self):
        from . import notifications, search  # noqa: F401  search registers the app's identifiers with core.search

        notifications.register()  # tenant webhooks and e-mail: the router and channels (core.outbox)
