"""Operator routes of the fleet app (/api/v1/ops/)."""
from django.urls import include, path

from core.api.routes import api_route

from .ops_views import NodeActionsView, NodeDetailView, NodeEventsView, NodeListView

urlpatterns: list = [
    api_route("nodes", NodeListView.as_view(), "ops-node-list"),
    api_route(r"nodes/(?P<pk>[^/]+)/actions", NodeActionsView.as_view(), "ops-node-actions"),
    api_route(r"nodes/(?P<pk>[^/]+)/events", NodeEventsView.as_view(), "ops-node-events"),
    api_route(r"nodes/(?P<pk>[^/]+)", NodeDetailView.as_view(), "ops-node-detail"),
    path("", include("fleet.api.eol_urls")),
    path("", include("fleet.api.plan_ops_urls")),
]
