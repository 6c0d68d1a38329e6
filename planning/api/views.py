"""Operator API for plans: migration plans (create idempotently, read, apply) and disposition plans."""

import json

from django.db.models import Count
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.permissions import IsAuthenticated
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api.idempotency import idempotent_create, read_key
from core.api.lookups import uuid_or_404
from core.api.pagination import paginate
from core.api.permissions import IsOperator
from core.api.problems import Problem
from core.api.schema import PAGE_PARAMETERS, ProblemSerializer, page_of
from planning.engines.disposition.types import InternalDemand
from planning.inputs import PlanInputError
from planning.models import CapacityPlan, DispositionPlan, MigrationPlan, PlannedAction
from planning.services import capacity_plans as capacity
from planning.services import disposition_plans as disposition
from planning.services.migration_plans import PlanNotApplicable, apply_plan, create_plan

from .serializers import (
    CapacityPlanIn,
    CapacityPlanOut,
    DispositionPlanIn,
    DispositionPlanOut,
    MigrationPlanSerializer,
    PlanParametersSerializer,
    field_errors,
    plan_parameters,
)

IDEMPOTENCY_KEY = OpenApiParameter(
    "Idempotency-Key",
    str,
    OpenApiParameter.HEADER,
    required=True,
    description="1-255 printable characters; a retry with the same key replays the answer",
)
PROBLEM = OpenApiResponse(ProblemSerializer, description="problem+json")


def _with_counts(*plans: MigrationPlan) -> list[MigrationPlan]:
    """Each plan's scheduled work counted by kind: one grouped query for however many plans."""
    counts: dict = {plan.pk: {} for plan in plans}
    rows = (
        PlannedAction.objects.filter(plan_id__in=list(counts))
        .values("plan_id", "kind")
        .annotate(n=Count("id"))
        .order_by("plan_id", "kind")
    )
    for row in rows:
        counts[row["plan_id"]][row["kind"]] = row["n"]
    for plan in plans:
        plan.action_counts = counts[plan.pk]
    return list(plans)


def _body(plan: MigrationPlan) -> dict:
    return MigrationPlanSerializer(_with_counts(plan)[0]).data


class MigrationPlanCollection(APIView):
    permission_classes = [IsOperator]
    ops_action = "migration_plan.create"

    @extend_schema(
        operation_id="ops_migration_plans_list",
        summary="Stored migration plans, newest first (keyset pages)",
        parameters=PAGE_PARAMETERS,
        responses={200: page_of(MigrationPlanSerializer, "MigrationPlanPage"), 401: PROBLEM, 403: PROBLEM},
    )
    def get(self, request):
        page = paginate(MigrationPlan.objects.all(), request=request, scope="ops:migration-plans")
        rows = MigrationPlanSerializer(_with_counts(*page.results), many=True).data
        return Response({"results": rows, "next_page_token": page.next_page_token})

    @extend_schema(
        operation_id="ops_migration_plans_create",
        summary="Plan a generation migration over the inventory",
        request=PlanParametersSerializer,
        parameters=[IDEMPOTENCY_KEY],
        responses={201: MigrationPlanSerializer, 400: PROBLEM, 401: PROBLEM, 403: PROBLEM, 409: PROBLEM, 422: PROBLEM},
    )
    def post(self, request):
        key = read_key(request, required=True)

        def perform() -> Response:
            try:
                plan = create_plan(parameters=plan_parameters(request.data), actor=request.user.actor)
            except PlanInputError as exc:
                raise Problem(
                    400, "validation_error", "Some fields are invalid; see errors.", errors=exc.errors
                ) from exc
            return Response(_body(plan), status=201, headers={"Location": f"/api/v1/ops/migration-plans/{plan.id}"})

        return idempotent_create(request, scope=request.user.idempotency_scope, key=key, perform=perform)


class MigrationPlanDetail(APIView):
    permission_classes = [IsOperator]

    @extend_schema(
        operation_id="ops_migration_plans_retrieve",
        summary="A stored migration plan",
        responses={200: MigrationPlanSerializer, 401: PROBLEM, 403: PROBLEM, 404: PROBLEM},
    )
    def get(self, request, pk):
        plan = MigrationPlan.objects.filter(pk=uuid_or_404(pk)).first()
        if plan is None:
            raise Problem(404, "not_found", "No such migration plan. Create one with POST /api/v1/ops/migration-plans.")
        return Response(_body(plan))


class MigrationPlanApply(APIView):
    permission_classes = [IsOperator]
    ops_action = "migration_plan.apply"

    @extend_schema(
        operation_id="ops_migration_plans_apply",
        request=None,
        parameters=[IDEMPOTENCY_KEY],
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


# ---- disposition plans


def plan_body(plan: DispositionPlan) -> dict:
    return DispositionPlanOut(plan).data


def create_plan_from(data: dict, *, actor: str) -> DispositionPlan:
    """Shared by the API and the console form: validated input → stored plan (SelectionError → 400)."""
    sel = data["selection"]
    selection = disposition.Selection(
        generation=sel["generation"],
        gpu_model=sel["gpu_model"],
        hall_id=str(sel["hall_id"] or ""),
        min_age_years=sel["min_age_years"],
        node_ids=[str(i) for i in sel["node_ids"]],
        migration_plan_id=str(sel["migration_plan_id"] or ""),
    )
    demands = [InternalDemand(**d) for d in data["demands"]]
    inputs = json.loads(json.dumps(data, default=str))  # UUIDs and Decimals as strings
    try:
        return disposition.create_disposition_plan(
            name=data["name"],
            selection=selection,
            demands=demands,
            horizon_months=data["horizon_months"],
            channel=data["channel"],
            lease_cap_nodes=data["lease_cap_nodes"],
            overrides=data["assumption_overrides"],
            actor=actor,
            inputs=inputs,
            rank_with_freed_power=data["rank_with_freed_power"],
            lease_on_demand=data["lease_on_demand"],
            market_overrides=data["market_overrides"],
            override_reason=data["override_reason"],
            migration_plan_id=str(data["migration_plan_id"] or ""),
        )
    except disposition.SelectionError as exc:
        raise Problem(
            400,
            "validation_error",
            "The selection cannot be planned; see errors.",
            errors=[{"field": "selection", "message": str(exc)}],
        ) from exc


class DispositionPlans(APIView):
    permission_classes = [IsAuthenticated, IsOperator]
    ops_action = "disposition_plan.create"

    @extend_schema(
        operation_id="ops_disposition_plan_list",
        summary="Stored disposition plans, newest first (keyset pages)",
        parameters=PAGE_PARAMETERS,
        responses={200: page_of(DispositionPlanOut, "DispositionPlanPage")},
    )
    def get(self, request):
        page = paginate(DispositionPlan.objects.all(), request=request, scope="ops:disposition-plans")
        return Response({"results": [plan_body(p) for p in page.results], "next_page_token": page.next_page_token})

    @extend_schema(
        operation_id="ops_disposition_plan_create",
        request=DispositionPlanIn,
        responses={201: DispositionPlanOut},
        parameters=[IDEMPOTENCY_KEY],
        summary="Value outgoing nodes and recommend a split (redeploy, lease, resale, recycle)",
    )
    def post(self, request):
        key = read_key(request)
        body = DispositionPlanIn(data=request.data)
        body.is_valid(raise_exception=True)

        def perform():
            plan = create_plan_from(body.validated_data, actor=request.user.actor)
            return Response(
                plan_body(plan),
                status=status.HTTP_201_CREATED,
                headers={"Location": f"/api/v1/ops/disposition-plans/{plan.pk}"},
            )

        return idempotent_create(request, scope=request.user.idempotency_scope, key=key, perform=perform)


class DispositionPlanDetail(APIView):
    permission_classes = [IsAuthenticated, IsOperator]

    @extend_schema(
        operation_id="ops_disposition_plan_get",
        responses={200: DispositionPlanOut},
        summary="A disposition plan with its split, option values, reasoning and assumptions",
    )
    def get(self, request, pk):
        plan = get_object_or_404(DispositionPlan.objects.all(), pk=uuid_or_404(pk))
        return Response(plan_body(plan))


def capacity_body(plan: CapacityPlan) -> dict:
    return CapacityPlanOut(
        {
            "id": plan.id,
            "name": plan.name,
            "created_by": plan.created_by,
            "created_at": plan.created_at,
            "inputs": plan.inputs,
            "result": plan.result,
            "migration_plan_id": plan.migration_plan_id,
        }
    ).data


def create_capacity_from(data: dict, *, actor: str) -> CapacityPlan:
    """Shared by the API and the console: validated input -> stored capacity plan (400 on bad figures)."""
    try:
        return capacity.create_capacity_plan(data=data, actor=actor)
    except capacity.CapacityInputError as exc:
        raise Problem(
            400, "validation_error", "The capacity plan cannot be sized; see errors.", errors=exc.errors
        ) from exc


class CapacityPlans(APIView):
    permission_classes = [IsAuthenticated, IsOperator]
    ops_action = "capacity_plan.create"

    @extend_schema(
        operation_id="ops_capacity_plan_list",
        summary="Stored capacity plans, newest first (keyset pages)",
        parameters=PAGE_PARAMETERS,
        responses={200: page_of(CapacityPlanOut, "CapacityPlanPage")},
    )
    def get(self, request):
        page = paginate(CapacityPlan.objects.all(), request=request, scope="ops:capacity-plans")
        return Response({"results": [capacity_body(p) for p in page.results], "next_page_token": page.next_page_token})

    @extend_schema(
        operation_id="ops_capacity_plan_create",
        request=CapacityPlanIn,
        responses={201: CapacityPlanOut, 400: PROBLEM},
        parameters=[IDEMPOTENCY_KEY],
        summary="Size GPUs, racks and kW per generation from a traffic forecast and a model",
    )
    def post(self, request):
        key = read_key(request, required=True)
        body = CapacityPlanIn(data=request.data)
        if not body.is_valid():
            # The same field paths as the migration planner and the console: forecast[0].output_tokens.
            raise Problem(
                400, "validation_error", "Some fields are invalid; see errors.", errors=field_errors(body.errors)
            )

        def perform():
            plan = create_capacity_from(body.validated_data, actor=request.user.actor)
            return Response(
                capacity_body(plan),
                status=status.HTTP_201_CREATED,
                headers={"Location": f"/api/v1/ops/capacity-plans/{plan.pk}"},
            )

        return idempotent_create(request, scope=request.user.idempotency_scope, key=key, perform=perform)


class CapacityPlanDetail(APIView):
    permission_classes = [IsAuthenticated, IsOperator]

    @extend_schema(
        operation_id="ops_capacity_plan_get",
        responses={200: CapacityPlanOut, 404: PROBLEM},
        summary="A capacity plan with its needs per month and generation, gap and deliveries",
    )
    def get(self, request, pk):
        plan = get_object_or_404(CapacityPlan.objects.all(), pk=uuid_or_404(pk))
        return Response(capacity_body(plan))


def migration_from_capacity(plan_id, *, actor: str) -> MigrationPlan:
    try:
        return capacity.migration_plan_from_gap(plan_id=plan_id, actor=actor)
    except capacity.CapacityInputError as exc:
        raise Problem(409, "no_gap", str(exc)) from exc
    except PlanInputError as exc:
        raise Problem(
            400, "validation_error", "The gap cannot be planned here; see errors.", errors=exc.errors
        ) from exc


class CapacityPlanToMigration(APIView):
    permission_classes = [IsAuthenticated, IsOperator]
    ops_action = "capacity_plan.to_migration"

    @extend_schema(
        operation_id="ops_capacity_plan_to_migration",
        request=None,
        parameters=[IDEMPOTENCY_KEY],
        responses={201: MigrationPlanSerializer, 404: PROBLEM, 409: PROBLEM},
        summary="Turn the capacity plan's gap into a migration plan's deliveries",
    )
    def post(self, request, pk):
        key = read_key(request, required=True)
        plan = get_object_or_404(CapacityPlan.objects.all(), pk=uuid_or_404(pk))

        def perform():
            migration = migration_from_capacity(plan.pk, actor=request.user.actor)
            return Response(
                _body(migration),
                status=status.HTTP_201_CREATED,
                headers={"Location": f"/api/v1/ops/migration-plans/{migration.pk}"},
            )

        return idempotent_create(request, scope=request.user.idempotency_scope, key=key, perform=perform)
