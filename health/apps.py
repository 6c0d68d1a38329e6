from django.apps import AppConfig


class HealthConfig(AppConfig):
    name = "health"
    verbose_name = "Health"

    def ready(self):
        from core.metrics import register_families

        from . import metrics, notifications, search  # noqa: F401  search registers its identifiers with core.search

        notifications.register()  # operator pages: the router and the paging channels (core.outbox)
        register_families(metrics.incident_families)  # open incidents, unacknowledged pages on /metrics
