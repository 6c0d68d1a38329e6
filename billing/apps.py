from django.apps import AppConfig


class BillingConfig(AppConfig):
    name = "billing"
    verbose_name = "Billing"

    def ready(self):
        from core.metrics import register_families
        from core.problem_types import register_app
        from fleet import sku_users

        from . import metrics, search  # noqa: F401  search registers the app's identifiers with core.search
        from .models import PriceBookEntry

        # a node type's slug is the SKU of these rows: it does not change while any names it
        sku_users.register("price-book entries", lambda slug: PriceBookEntry.objects.filter(sku=slug).count())
        register_families(metrics.ledger_families)  # the ledger's health on /metrics
        register_app(self)  # billing/problems.csv: the problem codes this app raises
