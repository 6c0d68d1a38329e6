"""Health API routes: incidents for operators, heartbeats and health reports from node agents."""

from core.api.routes import api_route

from . import agent_views, hooks, views

# Inbound webhooks of paging tools (signed; no bearer token): /api/v1/hooks/...
urlpatterns: list = [api_route("hooks/pagerduty", hooks.PagerDutyWebhook.as_view(), "hooks-pagerduty")]

ops_urlpatterns = [
    api_route("incidents", views.incident_list, "ops-incident-list"),
    api_route(r"incidents/(?P<pk>[^/]+)", views.incident_detail, "ops-incident-detail"),
    api_route(r"incidents/(?P<pk>[^/]+)/acknowledge", views.IncidentAcknowledge.as_view(), "ops-incident-acknowledge"),
    api_route(
        r"incidents/(?P<pk>[^/]+)/resolve-page", views.IncidentResolvePage.as_view(), "ops-incident-resolve-page"
    ),
]

agent_urlpatterns = [
    api_route("heartbeat", agent_views.heartbeat, "agent-heartbeat"),
    api_route("health-reports", agent_views.health_reports, "agent-health-reports"),
]
