from django.apps import AppConfig


class HealthConfig(AppConfig):
    name = "health"
    verbose_name = "Health"

    def ready(self):
        from . import notifications, search  # noqa: F401  search registers the app's identifiers with core.search

        notifications.register()  # operator pages: the router and the paging channels (core.outbox)
