"""Console pages of the development tools (mounted only where the app is installed)."""

from django.urls import path

from . import views

app_name = "devtools"

urlpatterns = [
    path("twin/", views.twin_report, name="twin"),
]
