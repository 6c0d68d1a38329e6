"""Ops API for end of life (API.md, ops): sanitisation records, the node's disposal checklist
(BMC reset, asset tags, chain of custody) and disposition plans. Every POST needs an
Idempotency-Key; bad input is 400 with `errors`, an unknown id 404."""
import json
from decimal import Decimal

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.permissions import IsAuthenticated
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api.idempotency import idempotent_create, read_key
from core.api.lookups import uuid_or_404
from core.api.permissions import IsOperator
from core.api.problems import Problem
from core.api.routes import api_route
from fleet.choices import SanitizationMethod
from fleet.models import DispositionPlan, Drive, Node
from fleet.selectors import data_handling_status
from fleet.services import disposition, sanitization
from fleet.services.disposition_valuation import InternalDemand

IDEMPOTENCY_HEADER = OpenApiParameter("Idempotency-Key", str, OpenApiParameter.HEADER, required=True,
                                      description="1-255 printable characters; a retry with the same key and body "
                                                  "returns the first answer")


class OpsView(APIView):
    permission_classes = [IsAuthenticated, IsOperator]


# ---- sanitisation records ----------------------------------------------------------------------

class SanitizationRecordIn(serializers.Serializer):
    method = serializers.ChoiceField(choices=SanitizationMethod.choices,
                                     help_text="NIST SP 800-88: clear, purge or destroy")
    technique = serializers.CharField(max_length=200, help_text="e.g. NVMe sanitize crypto erase, overwrite, shred")
    tool = serializers.CharField(max_length=200)
    verified = serializers.BooleanField()
    evidence = serializers.CharField(max_length=sanitization.MAX_EVIDENCE_CHARS,
                                     help_text="what proves it: tool output, verification read-back, photo reference")


class SanitizationRecordOut(serializers.Serializer):
    id = serializers.UUIDField()
    drive_id = serializers.UUIDField()
    drive_serial = serializers.CharField(source="drive.serial")
    node_id = serializers.UUIDField(source="drive.node_id")
    method = serializers.CharField()
    technique = serializers.CharField()
    tool = serializers.CharField()
    verified = serializers.BooleanField()
    evidence = serializers.CharField()
    actor = serializers.CharField()
    source = serializers.CharField()
    performed_at = serializers.DateTimeField()


class SanitizationRecordCreate(OpsView):
    ops_action = "drive.record_sanitization"

    @extend_schema(operation_id="ops_drive_sanitization_record_create", request=SanitizationRecordIn,
                   responses={201: SanitizationRecordOut}, parameters=[IDEMPOTENCY_HEADER],
                   summary="Record a drive's sanitisation (operator-entered, with evidence)")
    def post(self, request, pk):
        key = read_key(request)
        drive = get_object_or_404(Drive.objects.all(), pk=uuid_or_404(pk))
        body = SanitizationRecordIn(data=request.data)
        body.is_valid(raise_exception=True)

        def perform():
            record = sanitization.record_sanitization(drive=drive, actor=request.user.actor, **body.validated_data)
            return Response(SanitizationRecordOut(record).data, status=status.HTTP_201_CREATED)

        return idempotent_create(request, scope=request.user.idempotency_scope, key=key, perform=perform)


# ---- the node's disposal checklist ------------------------------------------------------------

class ReasonIn(serializers.Serializer):
    reason = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")


class CustodyTransferIn(serializers.Serializer):
    from_party = serializers.CharField(max_length=200, help_text="who hands the node over (e.g. the site)")
    to_party = serializers.CharField(max_length=200, help_text="buyer or recycler")
    document_ref = serializers.CharField(max_length=200, help_text="bill of lading, sale contract, certificate")
    at = serializers.DateTimeField(required=False, help_text="when custody passed; now if omitted")


class DataHandlingOut(serializers.Serializer):
    node_id = serializers.UUIDField()
    hostname = serializers.CharField()
    lifecycle = serializers.CharField()
    drives_total = serializers.IntegerField()
    drives_sanitized = serializers.IntegerField()
    unsanitized_drives = serializers.ListField(child=serializers.DictField())
    bmc_reset_at = serializers.DateTimeField(allow_null=True)
    asset_tags_removed_at = serializers.DateTimeField(allow_null=True)
    custody_transfers = serializers.IntegerField()
    retire_missing = serializers.ListField(child=serializers.CharField())
    dispose_missing = serializers.ListField(child=serializers.CharField())


def data_handling_body(node: Node) -> dict:
    s = data_handling_status([node.pk])[node.pk]
    return DataHandlingOut({
        "node_id": node.pk, "hostname": node.hostname, "lifecycle": node.lifecycle,
        "drives_total": s.drives_total, "drives_sanitized": s.drives_sanitized, "unsanitized_drives": s.unsanitized,
        "bmc_reset_at": s.bmc_reset_at, "asset_tags_removed_at": s.asset_tags_removed_at,
        "custody_transfers": s.custody_transfers, "retire_missing": s.retire_missing,
        "dispose_missing": s.dispose_missing,
    }).data


class NodeChecklistStep(OpsView):
    """POST records one checklist step for the node and answers with its whole checklist."""

    serializer_class = ReasonIn
    step = ""

    def record(self, node, request, data):
        raise NotImplementedError

    def post(self, request, pk):
        key = read_key(request)
        node = get_object_or_404(Node.objects.all(), pk=uuid_or_404(pk))
        body = self.serializer_class(data=request.data)
        body.is_valid(raise_exception=True)

        def perform():
            self.record(node, request, body.validated_data)
            return Response(data_handling_body(node), status=status.HTTP_201_CREATED)

        return idempotent_create(request, scope=request.user.idempotency_scope, key=key, perform=perform)


class BmcReset(NodeChecklistStep):
    ops_action = "node.record_bmc_reset"

    @extend_schema(operation_id="ops_node_bmc_reset", request=ReasonIn, responses={201: DataHandlingOut},
                   parameters=[IDEMPOTENCY_HEADER], summary="Record that the BMC credentials were reset and its logs cleared")
    def post(self, request, pk):
        return super().post(request, pk)

    def record(self, node, request, data):
        sanitization.record_bmc_reset(node=node, actor=request.user.actor, reason=data["reason"])


class AssetTagsRemoved(NodeChecklistStep):
    ops_action = "node.record_asset_tags_removed"

    @extend_schema(operation_id="ops_node_asset_tags_removed", request=ReasonIn, responses={201: DataHandlingOut},
                   parameters=[IDEMPOTENCY_HEADER], summary="Record that the node's asset tags were removed")
    def post(self, request, pk):
        return super().post(request, pk)

    def record(self, node, request, data):
        sanitization.record_asset_tags_removed(node=node, actor=request.user.actor, reason=data["reason"])


class CustodyTransfers(NodeChecklistStep):
    serializer_class = CustodyTransferIn
    ops_action = "node.record_custody_transfer"

    @extend_schema(operation_id="ops_node_custody_transfer_create", request=CustodyTransferIn,
                   responses={201: DataHandlingOut}, parameters=[IDEMPOTENCY_HEADER],
                   summary="Record a chain-of-custody transfer (to the buyer or recycler)")
    def post(self, request, pk):
        return super().post(request, pk)

    def record(self, node, request, data):
        sanitization.record_custody_transfer(node=node, actor=request.user.actor, **data)


class DataHandling(OpsView):
    @extend_schema(operation_id="ops_node_data_handling", responses={200: DataHandlingOut},
                   summary="The node's data-handling checklist: drives sanitised, BMC reset, tags, custody")
    def get(self, request, pk):
        node = get_object_or_404(Node.objects.all(), pk=uuid_or_404(pk))
        return Response(data_handling_body(node))


# ---- disposition plans ---------------------------------------------------------------------------

class SelectionIn(serializers.Serializer):
    generation = serializers.CharField(required=False, allow_blank=True, default="", help_text="e.g. hopper")
    gpu_model = serializers.CharField(required=False, allow_blank=True, default="", help_text="e.g. H100")
    hall_id = serializers.UUIDField(required=False, allow_null=True, default=None)
    min_age_years = serializers.DecimalField(max_digits=5, decimal_places=2, required=False, allow_null=True,
                                             default=None, min_value=Decimal(0))
    node_ids = serializers.ListField(child=serializers.UUIDField(), required=False, default=list, max_length=200_000)
    migration_plan_id = serializers.UUIDField(required=False, allow_null=True, default=None)

    def validate(self, attrs):
        if not any(attrs.get(k) for k in ("generation", "gpu_model", "hall_id", "node_ids", "migration_plan_id")) \
                and attrs.get("min_age_years") is None:
            raise serializers.ValidationError("select nodes by generation, gpu_model, hall_id, min_age_years, "
                                              "node_ids or migration_plan_id")
        return attrs


class DemandIn(serializers.Serializer):
    pool = serializers.CharField(max_length=100, help_text="internal pool, e.g. inference")
    nodes_wanted = serializers.IntegerField(min_value=1)
    value_per_gpu_hour = serializers.DecimalField(max_digits=8, decimal_places=4, min_value=Decimal(0),
                                                  help_text="USD per GPU-hour the pool's work is worth")
    utilisation = serializers.DecimalField(max_digits=4, decimal_places=3, min_value=Decimal(0), max_value=Decimal(1))
    horizon_months = serializers.IntegerField(min_value=1, max_value=120)


class DispositionPlanIn(serializers.Serializer):
    name = serializers.CharField(max_length=200)
    selection = SelectionIn()
    demands = DemandIn(many=True, required=False, default=list)
    horizon_months = serializers.IntegerField(min_value=1, max_value=120)
    channel = serializers.ChoiceField(choices=disposition.CHANNELS, default="broker")
    lease_cap_nodes = serializers.IntegerField(min_value=0, required=False, allow_null=True, default=None)
    assumption_overrides = serializers.DictField(
        child=serializers.DecimalField(max_digits=14, decimal_places=4, min_value=Decimal(0)), required=False,
        default=dict, help_text="override reference defaults: " + ", ".join(disposition.OVERRIDABLE))

    def validate_assumption_overrides(self, value):
        unknown = sorted(set(value) - set(disposition.OVERRIDABLE))
        if unknown:
            raise serializers.ValidationError(f"unknown assumptions {', '.join(unknown)}; "
                                              f"overridable: {', '.join(disposition.OVERRIDABLE)}")
        return value

    def validate_demands(self, value):
        pools = [d["pool"] for d in value]
        if len(pools) != len(set(pools)):
            raise serializers.ValidationError("each pool may appear once")
        return value


class DispositionPlanOut(serializers.Serializer):
    id = serializers.UUIDField()
    name = serializers.CharField()
    created_by = serializers.CharField()
    created_at = serializers.DateTimeField()
    inputs = serializers.JSONField()
    result = serializers.JSONField(help_text="split, option_returns, total_return, freed_power_value, allocations, "
                                             "blocks (option values per block), reasoning, assumptions (with sources)")


def plan_body(plan: DispositionPlan) -> dict:
    data = DispositionPlanOut(plan).data
    data["result"] = {k: v for k, v in plan.result.items() if k != "figures"}  # figures are for the console
    return data


def create_plan_from(data: dict, *, actor: str) -> DispositionPlan:
    """Shared by the API and the console form: validated input → stored plan (SelectionError → 400)."""
    sel = data["selection"]
    selection = disposition.Selection(
        generation=sel["generation"], gpu_model=sel["gpu_model"], hall_id=str(sel["hall_id"] or ""),
        min_age_years=sel["min_age_years"], node_ids=[str(i) for i in sel["node_ids"]],
        migration_plan_id=str(sel["migration_plan_id"] or ""))
    demands = [InternalDemand(**d) for d in data["demands"]]
    inputs = json.loads(json.dumps(data, default=str))  # UUIDs and Decimals as strings
    try:
        return disposition.create_disposition_plan(
            name=data["name"], selection=selection, demands=demands, horizon_months=data["horizon_months"],
            channel=data["channel"], lease_cap_nodes=data["lease_cap_nodes"],
            overrides=data["assumption_overrides"], actor=actor, inputs=inputs)
    except disposition.SelectionError as exc:
        raise Problem(400, "validation_error", "The selection cannot be planned; see errors.",
                      errors=[{"field": "selection", "message": str(exc)}]) from exc


class DispositionPlans(OpsView):
    ops_action = "disposition_plan.create"

    @extend_schema(operation_id="ops_disposition_plan_create", request=DispositionPlanIn,
                   responses={201: DispositionPlanOut}, parameters=[IDEMPOTENCY_HEADER],
                   summary="Value outgoing nodes and recommend a split (redeploy, lease, resale, recycle)")
    def post(self, request):
        key = read_key(request)
        body = DispositionPlanIn(data=request.data)
        body.is_valid(raise_exception=True)

        def perform():
            plan = create_plan_from(body.validated_data, actor=request.user.actor)
            return Response(plan_body(plan), status=status.HTTP_201_CREATED,
                            headers={"Location": f"/api/v1/ops/disposition-plans/{plan.pk}"})

        return idempotent_create(request, scope=request.user.idempotency_scope, key=key, perform=perform)


class DispositionPlanDetail(OpsView):
    @extend_schema(operation_id="ops_disposition_plan_get", responses={200: DispositionPlanOut},
                   summary="A disposition plan with its split, option values, reasoning and assumptions")
    def get(self, request, pk):
        plan = get_object_or_404(DispositionPlan.objects.all(), pk=uuid_or_404(pk))
        return Response(plan_body(plan))


urlpatterns = [
    api_route(r"drives/(?P<pk>[^/]+)/sanitization-records", SanitizationRecordCreate.as_view(),
              "ops-drive-sanitization-records"),
    api_route(r"nodes/(?P<pk>[^/]+)/data-handling", DataHandling.as_view(), "ops-node-data-handling"),
    api_route(r"nodes/(?P<pk>[^/]+)/bmc-reset", BmcReset.as_view(), "ops-node-bmc-reset"),
    api_route(r"nodes/(?P<pk>[^/]+)/asset-tags-removed", AssetTagsRemoved.as_view(), "ops-node-asset-tags-removed"),
    api_route(r"nodes/(?P<pk>[^/]+)/custody-transfers", CustodyTransfers.as_view(), "ops-node-custody-transfers"),
    api_route(r"disposition-plans", DispositionPlans.as_view(), "ops-disposition-plans"),
    api_route(r"disposition-plans/(?P<pk>[^/]+)", DispositionPlanDetail.as_view(), "ops-disposition-plan"),
]
