from django.apps import AppConfig


class HealthConfig(AppConfig):
    name = "health"
    verbose_name = "Health"

    def ready(self):
        from core.metrics import register_families
        from core.problem_types import register_app

        from . import metrics, notifications, search  # noqa: F401  search registers its identifiers with core.search

        register_app(self)  # health/problems.csv: the problem codes this app raises
        notifications.register()  # operator pages: the router and the paging channels (core.outbox)
        register_families(metrics.incident_families)  # open incidents, unacknowledged pages on /metrics
