"""Console pages of the health app."""

from django.urls import path

from . import views

app_name = "health"

urlpatterns = [
    path("health/", views.dashboard, name="dashboard"),
    path("health/policy/", views.policy, name="policy"),
    path("health/incidents/new/", views.new_incident, name="new-incident"),
    path("health/incidents/<str:pk>/", views.incident, name="incident"),
    path("health/incidents/<str:pk>/page/", views.incident_page, name="incident-page"),
]
