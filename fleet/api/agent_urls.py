"""Node agent routes of the fleet app (/api/agent/v1/)."""
from core.api.routes import api_route

from .agent_views import ActionResultsView, DesiredStateView

urlpatterns: list = [
    api_route("desired-state", DesiredStateView.as_view(), "agent-desired-state"),
    api_route("action-results", ActionResultsView.as_view(), "agent-action-results"),
]
