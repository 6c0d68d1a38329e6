"""Operator API of rolling upgrades (fleet.services.rollouts)."""

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.response import Response

from core.api.idempotency import idempotent_create, read_key
from core.api.lookups import uuid_or_404
from core.api.problems import Problem
from fleet.models import Rollout, SoftwareBaseline
from fleet.selectors import rollout_detail, rollouts_with_counts
from fleet.services.rollouts import control_rollout, create_rollout

from .serializers import RolloutControlIn, RolloutDetailOut, RolloutIn, RolloutNodeOut, RolloutOut
from .views import IDEMPOTENCY_HEADER, OpsView


def _detail(pk) -> Rollout:
    rollout = rollout_detail(pk)
    if rollout is None:
        raise Problem(404, "not_found", "No such rollout.")
    return rollout


def _detail_body(rollout) -> dict:
    return {**RolloutOut(rollout).data, "nodes": RolloutNodeOut(rollout.entries, many=True).data}


class RolloutList(OpsView):
    ops_action = "rollout.create"

    @extend_schema(operation_id="ops_rollout_list", responses=RolloutOut(many=True), summary="Rolling upgrades")
    def get(self, request):
        return Response(RolloutOut(rollouts_with_counts(), many=True).data)

    @extend_schema(
        operation_id="ops_rollout_create",
        request=RolloutIn,
        responses={201: RolloutDetailOut},
        parameters=[IDEMPOTENCY_HEADER],
        summary="Start a rolling upgrade of nodes to a baseline",
    )
    def post(self, request):
        key = read_key(request)
        body = RolloutIn(data=request.data)
        body.is_valid(raise_exception=True)
        data = dict(body.validated_data)
        baseline = get_object_or_404(SoftwareBaseline.objects.select_related("node_type"), pk=data.pop("baseline_id"))

        def perform():
            rollout = create_rollout(baseline=baseline, actor=request.user.actor, **data)
            return Response(_detail_body(_detail(rollout.pk)), status=status.HTTP_201_CREATED)

        return idempotent_create(request, scope=request.user.idempotency_scope, key=key, perform=perform)


class RolloutDetail(OpsView):
    @extend_schema(
        operation_id="ops_rollout_detail", responses=RolloutDetailOut, summary="One rollout, its waves and nodes"
    )
    def get(self, request, pk):
        return Response(_detail_body(_detail(uuid_or_404(pk))))


class RolloutControl(OpsView):
    ops_action = "rollout.control"

    @extend_schema(
        operation_id="ops_rollout_control",
        request=RolloutControlIn,
        responses=RolloutOut,
        summary="Pause, resume or cancel a rollout",
    )
    def post(self, request, pk):
        rollout = get_object_or_404(Rollout.objects.all(), pk=uuid_or_404(pk))
        body = RolloutControlIn(data=request.data)
        body.is_valid(raise_exception=True)
        control_rollout(rollout=rollout, actor=request.user.actor, **body.validated_data)
        return Response(RolloutOut(_detail(rollout.pk)).data)
