"""Core's console pages and the problem-type pages."""

from django.urls import path

from . import views

app_name = "core"

urlpatterns = [
    path("search/", views.search, name="search"),
    # what each API problem `type` means (core.problem_types): public, like the API's schema
    path("docs/problems/", views.problem_type_list, name="problem-types"),
    path("docs/problems/<slug:code>", views.problem_type_detail, name="problem-type"),
    path("notifications/", views.notifications, name="notifications"),
    path("notifications/deliveries/<str:pk>/retry/", views.retry_notification, name="notification-retry"),
]
