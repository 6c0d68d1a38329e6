"""Console pages of plans: generation migrations (/plans/) and dispositions (/plans/disposition/)."""

from django.urls import path

from . import views

app_name = "planning"

urlpatterns = [
    path("plans/", views.migration_list, name="migration-plan-list"),
    path("plans/new/", views.migration_create, name="migration-plan-create"),
    path("plans/<uuid:pk>/", views.migration_detail, name="migration-plan-detail"),
    path("plans/<uuid:pk>/apply/", views.migration_apply, name="migration-plan-apply"),
    path("plans/<uuid:pk>/progress/", views.migration_progress, name="migration-plan-progress"),
    path("plans/capacity/", views.capacity_list, name="capacity-plan-list"),
    path("plans/capacity/<uuid:pk>/", views.capacity_detail, name="capacity-plan-detail"),
    path("plans/capacity/<uuid:pk>/migration/", views.capacity_to_migration, name="capacity-plan-to-migration"),
    path("plans/disposition/", views.disposition_list, name="disposition-plan-list"),
    path("plans/disposition/<str:pk>/", views.disposition_detail, name="disposition-plan-detail"),
    path("plans/disposition/<str:pk>/nodes/", views.disposition_node_action, name="disposition-plan-nodes"),
]
