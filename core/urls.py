"""Core's console pages."""

from django.urls import path

from . import views

app_name = "core"

urlpatterns = [
    path("search/", views.search, name="search"),
    path("notifications/", views.notifications, name="notifications"),
    path("notifications/deliveries/<str:pk>/retry/", views.retry_notification, name="notification-retry"),
]
