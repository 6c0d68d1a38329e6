"""Operator API: incidents with their timeline (docs/api.md, `GET /incidents`, `GET /incidents/{id}`)."""

from django.db.models import Prefetch
from drf_spectacular.utils import (
    OpenApiParameter,
    extend_schema,
    extend_schema_field,
    inline_serializer,
)
from rest_framework import serializers
from rest_framework.decorators import api_view, permission_classes
from rest_framework.permissions import IsAuthenticated
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api.lookups import uuid_or_404
from core.api.pagination import paginate
from core.api.permissions import IsOperator
from core.api.problems import Problem
from core.api.schema import PAGE_PARAMETERS, READ_ERRORS, WRITE_ERRORS
from health.choices import IncidentState
from health.models import Incident, IncidentEvent
from health.services.paging import acknowledge_page, resolve_page


class IncidentEventSerializer(serializers.ModelSerializer):
    class Meta:
        model = IncidentEvent
        fields = ["at", "step", "actor", "detail"]


class IncidentNodeSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    hostname = serializers.CharField()
    lifecycle = serializers.CharField()


class IncidentImpactSerializer(serializers.Serializer):
    tenant_id = serializers.UUIDField()
    allocation_id = serializers.UUIDField()
    node_id = serializers.UUIDField()
    gpus = serializers.IntegerField()
    start = serializers.DateTimeField()
    end = serializers.DateTimeField(allow_null=True)
    credited = serializers.BooleanField()


class IncidentSerializer(serializers.ModelSerializer):
    nodes = serializers.SerializerMethodField()
    affected = serializers.SerializerMethodField()
    timeline = IncidentEventSerializer(source="events", many=True)
    impact_gpu_hours = serializers.DecimalField(max_digits=12, decimal_places=2, coerce_to_string=True)

    class Meta:
        model = Incident
        fields = [
            "id",
            "title",
            "opened_by",
            "state",
            "severity",
            "signals",
            "nodes",
            "affected",
            "opened_at",
            "closed_at",
            "impact_gpu_hours",
            "cause",
            "attribution",
            "scope",
            "scope_key",
            "likely_cause",
            "paged_at",
            "page_acknowledged_at",
            "page_acknowledged_by",
            "page_escalated_at",
            "page_resolved_at",
            "timeline",
        ]

    @extend_schema_field(IncidentNodeSerializer(many=True))
    def get_nodes(self, obj):
        return [{"id": str(n.pk), "hostname": n.hostname, "lifecycle": n.lifecycle} for n in obj.nodes.all()]

    @extend_schema_field(IncidentImpactSerializer(many=True))
    def get_affected(self, obj):
        return [
            {
                "tenant_id": str(i.tenant_id),
                "allocation_id": str(i.allocation_id),
                "node_id": str(i.node_id),
                "gpus": i.gpus,
                "start": i.start,
                "end": i.end,
                "credited": i.credited,
            }
            for i in obj.impacts.all()
        ]


def _incidents():
    return Incident.objects.prefetch_related(
        "nodes", "impacts", Prefetch("events", queryset=IncidentEvent.objects.order_by("at", "id"))
    )


@extend_schema(
    operation_id="ops_incidents_list",
    parameters=[*PAGE_PARAMETERS, OpenApiParameter("state", str, required=False, enum=IncidentState.values)],
    responses={
        200: inline_serializer(
            "IncidentPage",
            {"results": IncidentSerializer(many=True), "next_page_token": serializers.CharField(allow_null=True)},
        ),
        **READ_ERRORS,
    },
)
@api_view(["GET"])
@permission_classes([IsOperator])
def incident_list(request):
    state = request.query_params.get("state")
    queryset = _incidents()
    if state:
        if state not in IncidentState.values:
            raise Problem(
                400,
                "validation_error",
                f"state must be one of: {', '.join(IncidentState.values)}.",
                errors=[{"field": "state", "message": "Unknown incident state."}],
            )
        queryset = queryset.filter(state=state)
    page = paginate(queryset, request=request, scope="ops:incidents", filters={"state": state or ""})
    return Response(
        {"results": IncidentSerializer(page.results, many=True).data, "next_page_token": page.next_page_token}
    )


@extend_schema(operation_id="ops_incidents_retrieve", responses={200: IncidentSerializer, **READ_ERRORS})
@api_view(["GET"])
@permission_classes([IsOperator])
def incident_detail(request, pk):
    incident = _incidents().filter(pk=uuid_or_404(pk)).first()
    if incident is None:
        raise Problem(404, "not_found", "No incident with that id; list them at /api/v1/ops/incidents.")
    return Response(IncidentSerializer(incident).data)


class _PageAction(APIView):
    """Acknowledge or resolve an incident's page: the paging tools are told through the outbox."""

    permission_classes = [IsAuthenticated, IsOperator]
    ops_action = "incident.acknowledge"
    act = staticmethod(acknowledge_page)

    def post(self, request, pk):
        incident = Incident.objects.filter(pk=uuid_or_404(pk)).first()
        if incident is None:
            raise Problem(404, "not_found", "No incident with that id; list them at /api/v1/ops/incidents.")
        self.act(incident, actor=request.user.actor, via="the API")
        return Response(IncidentSerializer(_incidents().get(pk=incident.pk)).data)


class IncidentAcknowledge(_PageAction):
    @extend_schema(
        operation_id="ops_incident_acknowledge",
        request=None,
        responses={200: IncidentSerializer, **WRITE_ERRORS},
        summary="Acknowledge the incident's page (stops its escalation; PagerDuty is told)",
    )
    def post(self, request, pk):
        return super().post(request, pk)


class IncidentResolvePage(_PageAction):
    act = staticmethod(resolve_page)

    @extend_schema(
        operation_id="ops_incident_resolve_page",
        request=None,
        responses={200: IncidentSerializer, **WRITE_ERRORS},
        summary="Resolve the incident's page (the incident itself closes through its post-mortem)",
    )
    def post(self, request, pk):
        return super().post(request, pk)
