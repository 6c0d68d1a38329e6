"""Console pages of generation migration plans (/plans/), included from fleet/urls.py."""
from django.urls import path

from . import plan_views

urlpatterns = [
    path("plans/", plan_views.plan_list, name="plan-list"),
    path("plans/new/", plan_views.plan_create, name="plan-create"),
    path("plans/<uuid:pk>/", plan_views.plan_detail, name="plan-detail"),
    path("plans/<uuid:pk>/apply/", plan_views.plan_apply, name="plan-apply"),
]
