"""Ops API for generation migration plans: create (idempotent), read, apply."""
from django.db.models import Count
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api.idempotency import idempotent_create, read_key
from core.api.lookups import uuid_or_404
from core.api.permissions import IsOperator
from core.api.problems import Problem
from fleet.models import MigrationPlan
from fleet.services.migration_inputs import PlanInputError, PlanParametersSerializer
from fleet.services.migration_plans import PlanNotApplicable, apply_plan, create_plan

from core.api.schema import ProblemSerializer

from .plan_serializers import MigrationPlanSerializer

IDEMPOTENCY_KEY = OpenApiParameter("Idempotency-Key", str, OpenApiParameter.HEADER, required=True,
                                   description="1-255 printable characters; a retry with the same key replays the answer")
PROBLEM = OpenApiResponse(ProblemSerializer, description="problem+json")


def _with_counts(plan: MigrationPlan) -> MigrationPlan:
    rows = plan.actions.values("kind").annotate(n=Count("id")).order_by("kind")
    plan.action_counts = {r["kind"]: r["n"] for r in rows}
    return plan


def _body(plan: MigrationPlan) -> dict:
    return MigrationPlanSerializer(_with_counts(plan)).data


class MigrationPlanCollection(APIView):
    permission_classes = [IsOperator]
    ops_action = "migration_plan.create"

    @extend_schema(
        operation_id="ops_migration_plans_create",
        summary="Plan a generation migration over the inventory",
        request=PlanParametersSerializer, parameters=[IDEMPOTENCY_KEY],
        responses={201: MigrationPlanSerializer, 400: PROBLEM, 401: PROBLEM, 403: PROBLEM, 409: PROBLEM, 422: PROBLEM},
    )
    def post(self, request):
        key = read_key(request, required=True)

        def perform() -> Response:
            try:
                plan = create_plan(parameters=request.data, actor=request.user.actor)
            except PlanInputError as exc:
                raise Problem(400, "validation_error", "Some fields are invalid; see errors.", errors=exc.errors) from exc
            return Response(_body(plan), status=201, headers={"Location": f"/api/v1/ops/migration-plans/{plan.id}"})

        return idempotent_create(request, scope=request.user.idempotency_scope, key=key, perform=perform)


class MigrationPlanDetail(APIView):
    permission_classes = [IsOperator]

    @extend_schema(operation_id="ops_migration_plans_retrieve", summary="A stored migration plan",
                   responses={200: MigrationPlanSerializer, 401: PROBLEM, 403: PROBLEM, 404: PROBLEM})
    def get(self, request, pk):
        plan = MigrationPlan.objects.filter(pk=uuid_or_404(pk)).first()
        if plan is None:
            raise Problem(404, "not_found", "No such migration plan. Create one with POST /api/v1/ops/migration-plans.")
        return Response(_body(plan))


class MigrationPlanApply(APIView):
    permission_classes = [IsOperator]
    ops_action = "migration_plan.apply"

    @extend_schema(
        operation_id="ops_migration_plans_apply", request=None, parameters=[IDEMPOTENCY_KEY],
        summary="Schedule the plan's upgrades, node intakes and decommissions in the inventory (idempotent)",
        responses={200: MigrationPlanSerializer, 400: PROBLEM, 401: PROBLEM, 403: PROBLEM, 404: PROBLEM, 409: PROBLEM},
    )
    def post(self, request, pk):
        key = read_key(request, required=True)
        plan_id = uuid_or_404(pk)
        if not MigrationPlan.objects.filter(pk=plan_id).exists():
            raise Problem(404, "not_found", "No such migration plan. Create one with POST /api/v1/ops/migration-plans.")

        def perform() -> Response:
            try:
                plan, _ = apply_plan(plan_id=plan_id, actor=request.user.actor)
            except PlanNotApplicable as exc:
                raise Problem(409, "plan_infeasible", str(exc)) from exc
            return Response(_body(plan), status=200)

        return idempotent_create(request, scope=request.user.idempotency_scope, key=key, perform=perform)
