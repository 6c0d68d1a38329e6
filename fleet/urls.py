"""Fleet console pages."""
from django.urls import path

from . import views

app_name = "fleet"

urlpatterns = [
    path("", views.overview, name="overview"),
    path("fleet/", views.rack_list, name="rack-list"),
    # node lifecycle: list, node page, operator actions
    path("fleet/nodes/", views.node_list, name="node-list"),
    path("fleet/nodes/<str:pk>/", views.node_detail, name="node-detail"),
    path("fleet/nodes/<str:pk>/actions/", views.node_action, name="node-action"),
]
