"""Planning API routes (operator API only; see fleet/api/urls.py for the three route lists)."""

from core.api.routes import api_route

from . import views

urlpatterns: list = []

ops_urlpatterns = [
    api_route(r"migration-plans", views.MigrationPlanCollection.as_view(), "migration-plan-list"),
    api_route(r"migration-plans/(?P<pk>[^/]+)/apply", views.MigrationPlanApply.as_view(), "migration-plan-apply"),
    api_route(r"migration-plans/(?P<pk>[^/]+)", views.MigrationPlanDetail.as_view(), "migration-plan-detail"),
    api_route(r"disposition-plans", views.DispositionPlans.as_view(), "ops-disposition-plans"),
    api_route(r"disposition-plans/(?P<pk>[^/]+)", views.DispositionPlanDetail.as_view(), "ops-disposition-plan"),
    api_route(r"capacity-plans", views.CapacityPlans.as_view(), "ops-capacity-plans"),
    api_route(
        r"capacity-plans/(?P<pk>[^/]+)/migration-plan",
        views.CapacityPlanToMigration.as_view(),
        "ops-capacity-plan-to-migration",
    ),
    api_route(r"capacity-plans/(?P<pk>[^/]+)", views.CapacityPlanDetail.as_view(), "ops-capacity-plan"),
]
