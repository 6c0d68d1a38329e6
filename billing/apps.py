from django.apps import AppConfig


class BillingConfig(AppConfig):
    name = "billing"
    verbose_name = "Billing"

    def ready(self):
        from core.problem_types import register_app

        register_app(self)  # billing/problems.csv: the problem codes this app raises
        from fleet import sku_users

        from . import search  # noqa: F401  registers the app's identifiers with core.search
        from .models import PriceBookEntry

        # a node type's slug is the SKU of these rows: it does not change while any names it
        sku_users.register("price-book entries", lambda slug: PriceBookEntry.objects.filter(sku=slug).count())
