"""/api/v1/ops/migration-plans routes (own module so other fleet routes merge cleanly)."""
from core.api.routes import api_route

from .plan_views import MigrationPlanApply, MigrationPlanCollection, MigrationPlanDetail

urlpatterns = [
    api_route(r"migration-plans", MigrationPlanCollection.as_view(), "migration-plan-list"),
    api_route(r"migration-plans/(?P<pk>[^/]+)/apply", MigrationPlanApply.as_view(), "migration-plan-apply"),
    api_route(r"migration-plans/(?P<pk>[^/]+)", MigrationPlanDetail.as_view(), "migration-plan-detail"),
]
