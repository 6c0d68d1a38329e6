"""Fleet console pages."""
from django.urls import include, path

from . import views

app_name = "fleet"

urlpatterns = [
    path("", views.overview, name="overview"),
    path("fleet/", views.rack_list, name="rack-list"),
    path("", include("fleet.plan_urls")),
]
