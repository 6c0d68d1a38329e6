"""Fleet console pages, dashboard chart endpoints and /metrics."""

from django.urls import path

from . import software_pages, views
from .metrics import MetricsView

app_name = "fleet"

urlpatterns = [
    path("", views.overview, name="overview"),
    path("fleet/now/", views.now_tiles, name="now-tiles"),
    path("fleet/", views.rack_list, name="rack-list"),
    path("fleet/power/", views.power, name="power"),
    path("fleet/halls/<str:hall_id>/floor/", views.floor_map, name="floor-map"),
    path("fleet/racks/<str:rack_id>/", views.rack_detail, name="rack-detail"),
    path("fleet/charts/<slug:name>.json", views.chart_json, name="chart-json"),
    path("metrics", MetricsView.as_view(), name="metrics"),
    # node lifecycle: list, node page, operator actions
    path("fleet/software/drift/", software_pages.drift, name="software-drift"),
    path("fleet/rollouts/", software_pages.rollout_list, name="rollout-list"),
    path("fleet/rollouts/<str:pk>/", software_pages.rollout_detail_page, name="rollout-detail"),
    path("fleet/nodes/", views.node_list, name="node-list"),
    path("fleet/nodes/<str:pk>/", views.node_detail, name="node-detail"),
    path("fleet/nodes/<str:pk>/actions/", views.node_action, name="node-action"),
    path("fleet/nodes/<str:pk>/power/", views.node_power_action, name="node-power"),
    path("fleet/nodes/<str:pk>/certificate/", views.certificate, name="node-certificate"),
    path("fleet/nodes/<str:pk>/certificate.pdf", views.certificate_pdf, name="node-certificate-pdf"),
]
