"""Operator API of the fleet's software: golden baselines per node type and drift."""

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.response import Response

from core.api.idempotency import idempotent_create, read_key
from core.api.lookups import uuid_or_404
from fleet.models import NodeType, SoftwareBaseline
from fleet.selectors import drift_report
from fleet.services.baselines import create_baseline, set_golden

from .serializers import BaselineIn, BaselineOut, DriftComponentOut, ReasonIn
from .views import IDEMPOTENCY_HEADER, OpsView

MAX_LISTED = 500  # baselines are a handful per node type; the list is bounded anyway


class BaselineList(OpsView):
    ops_action = "baseline.create"

    @extend_schema(operation_id="ops_baseline_list", responses=BaselineOut(many=True), summary="Software baselines")
    def get(self, request):
        rows = SoftwareBaseline.objects.select_related("node_type").order_by("node_type__slug", "-created_at")
        return Response(BaselineOut(rows[:MAX_LISTED], many=True).data)

    @extend_schema(
        operation_id="ops_baseline_create",
        request=BaselineIn,
        responses={201: BaselineOut},
        parameters=[IDEMPOTENCY_HEADER],
        summary="Create a software baseline for a node type (optionally golden)",
    )
    def post(self, request):
        key = read_key(request)
        body = BaselineIn(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        node_type = get_object_or_404(NodeType.objects.all(), slug=data["node_type"])

        def perform():
            baseline = create_baseline(
                node_type=node_type,
                name=data["name"],
                versions=data["versions"],
                golden=data["golden"],
                actor=request.user.actor,
                reason=data["reason"],
            )
            return Response(BaselineOut(baseline).data, status=status.HTTP_201_CREATED)

        return idempotent_create(request, scope=request.user.idempotency_scope, key=key, perform=perform)


class BaselineGolden(OpsView):
    ops_action = "baseline.set_golden"

    @extend_schema(
        operation_id="ops_baseline_set_golden",
        request=ReasonIn,
        responses=BaselineOut,
        summary="Make this baseline its node type's golden one",
    )
    def post(self, request, pk):
        baseline = get_object_or_404(SoftwareBaseline.objects.all(), pk=uuid_or_404(pk))
        body = ReasonIn(data=request.data)
        body.is_valid(raise_exception=True)
        baseline = set_golden(baseline=baseline, actor=request.user.actor, reason=body.validated_data["reason"])
        return Response(BaselineOut(baseline).data)


class SoftwareDrift(OpsView):
    @extend_schema(
        operation_id="ops_software_drift",
        responses=DriftComponentOut(many=True),
        summary="Nodes off their type's golden baseline, grouped by component",
    )
    def get(self, request):
        report = drift_report()
        return Response(
            DriftComponentOut(
                [
                    {
                        "component": g.component,
                        "node_type": g.node_type,
                        "baseline": g.baseline,
                        "expected": g.expected,
                        "nodes_on_baseline": g.nodes_on_baseline,
                        "nodes_drifting": g.drifting_count,
                        "drifting": [
                            {"actual": actual, "count": len(hosts), "hostnames": hosts[:50]}
                            for actual, hosts in sorted(g.drifting.items())
                        ],
                    }
                    for g in report.groups
                ],
                many=True,
            ).data
        )
