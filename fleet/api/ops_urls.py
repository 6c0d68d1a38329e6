"""ops_urls routes of the fleet app."""
from django.urls import include, path

urlpatterns: list = [
    path("", include("fleet.api.eol_urls")),
    path("", include("fleet.api.plan_ops_urls")),
]
