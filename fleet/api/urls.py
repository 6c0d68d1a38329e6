"""Fleet API routes. Each app's api/urls.py publishes up to three route lists, mounted by
config/urls.py: ``urlpatterns`` under /api/v1/ (tenant API), ``ops_urlpatterns`` under
/api/v1/ops/ (operator API) and ``agent_urlpatterns`` under /api/agent/v1/ (node agent API)."""

from core.api.routes import api_route

from . import agent_views, bmc_views, rollout_views, software_views, views

urlpatterns: list = []

ops_urlpatterns = [
    api_route("baselines", software_views.BaselineList.as_view(), "ops-baseline-list"),
    api_route(r"baselines/(?P<pk>[^/]+)/golden", software_views.BaselineGolden.as_view(), "ops-baseline-golden"),
    api_route("rollouts", rollout_views.RolloutList.as_view(), "ops-rollout-list"),
    api_route(r"rollouts/(?P<pk>[^/]+)/control", rollout_views.RolloutControl.as_view(), "ops-rollout-control"),
    api_route(r"rollouts/(?P<pk>[^/]+)", rollout_views.RolloutDetail.as_view(), "ops-rollout-detail"),
    api_route("software-drift", software_views.SoftwareDrift.as_view(), "ops-software-drift"),
    api_route("bmc-enrolments", bmc_views.BMCEnrolmentView.as_view(), "ops-bmc-enrolments"),
    api_route("nodes", views.NodeListView.as_view(), "ops-node-list"),
    api_route(r"nodes/(?P<pk>[^/]+)/actions", views.NodeActionsView.as_view(), "ops-node-actions"),
    api_route(r"nodes/(?P<pk>[^/]+)/events", views.NodeEventsView.as_view(), "ops-node-events"),
    api_route(r"nodes/(?P<pk>[^/]+)/data-handling", views.DataHandling.as_view(), "ops-node-data-handling"),
    api_route(r"nodes/(?P<pk>[^/]+)/bmc-reset", views.BmcReset.as_view(), "ops-node-bmc-reset"),
    api_route(
        r"nodes/(?P<pk>[^/]+)/asset-tags-removed", views.AssetTagsRemoved.as_view(), "ops-node-asset-tags-removed"
    ),
    api_route(r"nodes/(?P<pk>[^/]+)/custody-transfers", views.CustodyTransfers.as_view(), "ops-node-custody-transfers"),
    api_route(r"nodes/(?P<pk>[^/]+)/bmc", bmc_views.NodeBMCView.as_view(), "ops-node-bmc"),
    api_route(r"nodes/(?P<pk>[^/]+)/power", bmc_views.NodePowerView.as_view(), "ops-node-power"),
    api_route(r"nodes/(?P<pk>[^/]+)", views.NodeDetailView.as_view(), "ops-node-detail"),
    api_route(r"sites/(?P<pk>[^/]+)/grid-intensity", views.SiteGridIntensity.as_view(), "ops-site-grid-intensity"),
    api_route(
        r"drives/(?P<pk>[^/]+)/sanitization-records",
        views.SanitizationRecordCreate.as_view(),
        "ops-drive-sanitization-records",
    ),
]

agent_urlpatterns = [
    api_route("desired-state", agent_views.DesiredStateView.as_view(), "agent-desired-state"),
    api_route("action-results", agent_views.ActionResultsView.as_view(), "agent-action-results"),
    api_route("software-inventory", agent_views.SoftwareInventoryView.as_view(), "agent-software-inventory"),
    api_route("identity", agent_views.IdentityHandoffView.as_view(), "agent-identity-handoff"),
]
