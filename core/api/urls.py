"""Core's API routes (mounted by config/urls.py like every app's)."""

from .notifications import OpsDeliveryList, OpsDeliveryRetry
from .routes import api_route
from .views import search

urlpatterns: list = []
ops_urlpatterns = [
    api_route("search", search, "ops-search"),
    api_route("notification-deliveries", OpsDeliveryList.as_view(), "ops-notification-deliveries"),
    api_route(
        r"notification-deliveries/(?P<pk>[^/]+)/retry", OpsDeliveryRetry.as_view(), "ops-notification-delivery-retry"
    ),
]
