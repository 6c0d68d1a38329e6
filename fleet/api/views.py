"""Operator node API: list, detail, actions, events, and the end-of-life checklist (sanitisation
records, BMC reset, asset tags, custody). The node agent's routes are in agent_views.py."""

from django.db.models import F
from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import parsers, status
from rest_framework.permissions import IsAuthenticated
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api.idempotency import idempotent_create, read_key
from core.api.lookups import uuid_or_404
from core.api.pagination import paginate
from core.api.permissions import IsOperator
from core.api.problems import Problem
from fleet import selectors
from fleet.filters import NodeFilterSet
from fleet.models import Drive, Node, NodeEvent, Site
from fleet.selectors import certificate_for
from fleet.services import bmc_disposal, sanitization
from fleet.services.drive_gate import RMA, gate_status
from fleet.services.grid_profile import MAX_BYTES, upload_grid_profile
from fleet.services.lifecycle import ExitRefused, InvalidTransition
from fleet.services.operator_actions import (
    REGISTRY,
    ActionRefused,
    available_actions,
    perform_operator_action,
)
from health.selectors import conditions_for_nodes
from tenants.selectors import live_allocation_ids

from .serializers import (
    BmcResetIn,
    CustodyTransferIn,
    DataHandlingOut,
    GridProfileOut,
    NodeActionIn,
    NodeEventOut,
    NodeOut,
    ReasonIn,
    SanitizationRecordIn,
    SanitizationRecordOut,
)

IDEMPOTENCY_HEADER = OpenApiParameter(
    "Idempotency-Key",
    str,
    OpenApiParameter.HEADER,
    required=True,
    description="1-255 printable characters; a retry with the same key and body returns the first answer",
)


class OpsView(APIView):
    permission_classes = [IsAuthenticated, IsOperator]


_FILTER_PARAMS = [
    OpenApiParameter(name, str, required=False)
    for name in ("site", "hall", "rack", "generation", "lifecycle", "health", "cordoned", "page_size", "page_token")
]


def _filtered_nodes(params):
    """The node list under NodeFilterSet's validation: a bad filter is 400, never an empty list."""
    filterset = NodeFilterSet(params, queryset=selectors.node_list({}))
    if not filterset.is_valid():
        raise Problem(
            400, "validation_error", "Some filters are invalid; see errors.", errors=filterset.errors_as_list()
        )
    return filterset.qs, filterset.normalised()


def serialize_nodes(nodes: list[Node]) -> list[dict]:
    """Nodes with their allocation, drives and conditions: a fixed number of queries per page."""
    ids = [n.pk for n in nodes]
    context = {
        "allocations": live_allocation_ids(ids),
        "drives": selectors.drives_for_nodes(ids),
        "conditions": conditions_for_nodes(ids),
    }
    return NodeOut(nodes, many=True, context=context).data


def _node_or_404(pk) -> Node:
    node = selectors.node_list({}).filter(pk=uuid_or_404(pk)).first()
    if node is None:
        raise Problem(404, "not_found", "No node with this id. List /api/v1/ops/nodes to find it.")
    return node


class NodeListView(APIView):
    permission_classes = [IsOperator]

    @extend_schema(parameters=_FILTER_PARAMS, responses=NodeOut(many=True), summary="List nodes")
    def get(self, request):
        nodes, filters = _filtered_nodes(request.query_params)
        page = paginate(nodes, request=request, scope="ops", filters=filters)
        return Response({"results": serialize_nodes(page.results), "next_page_token": page.next_page_token})


class NodeDetailView(APIView):
    permission_classes = [IsOperator]

    @extend_schema(responses=NodeOut, summary="One node")
    def get(self, request, pk):
        return Response(serialize_nodes([_node_or_404(pk)])[0])


class NodeActionsView(APIView):
    permission_classes = [IsOperator]

    def ops_action_for(self, request):
        """The permission depends on the action named in the body (core.services.permissions)."""
        action = request.data.get("action") if isinstance(request.data, dict) else None
        return f"node.{action}" if isinstance(action, str) and action in REGISTRY else None

    @extend_schema(
        request=NodeActionIn,
        responses={202: NodeOut},
        summary="Run an operator action on a node",
        parameters=[OpenApiParameter("Idempotency-Key", str, OpenApiParameter.HEADER, required=True)],
    )
    def post(self, request, pk):
        key = read_key(request)
        node_id = _node_or_404(pk).pk
        body = NodeActionIn(data=request.data)
        body.is_valid(raise_exception=True)
        action, reason = body.validated_data["action"], body.validated_data["reason"]
        if action not in REGISTRY:
            raise Problem(
                400,
                "validation_error",
                f"Unknown action {action!r}.",
                errors=[{"field": "action", "message": f"one of {', '.join(sorted(REGISTRY))}"}],
            )

        def perform():
            try:
                perform_operator_action(
                    node_id=node_id,
                    action=action,
                    actor=request.user.actor,
                    reason=reason,
                    user=request.user.user,
                    force=body.validated_data["force"],
                )
            except ExitRefused as exc:
                raise Problem(409, exc.code, exc.detail, extra={"gate": exc.status.as_dict()}) from None
            except InvalidTransition as exc:
                raise Problem(
                    409,
                    "invalid_transition",
                    exc.detail,
                    extra={"lifecycle": exc.from_state, "allowed_actions": _allowed_names(node_id)},
                ) from None
            except ActionRefused as exc:
                raise Problem(409, exc.code, exc.detail, extra=exc.extra) from None
            return Response(serialize_nodes([_node_or_404(node_id)])[0], status=202)

        return idempotent_create(request, scope=request.user.idempotency_scope, key=key, perform=perform)


def _allowed_names(node_id) -> list[str]:

    return [a.name for a in available_actions(Node.objects.get(pk=node_id))]


class NodeEventsView(APIView):
    permission_classes = [IsOperator]

    @extend_schema(
        responses=NodeEventOut(many=True),
        summary="A node's audit trail, newest first",
        parameters=[OpenApiParameter("page_size", int), OpenApiParameter("page_token", str)],
    )
    def get(self, request, pk):
        node = _node_or_404(pk)
        # Events are keyed by when they happened; the pager walks (created_at, id) newest first.
        events = NodeEvent.objects.filter(node=node).annotate(created_at=F("at"))
        page = paginate(events, request=request, scope=f"ops:node-events:{node.pk}")
        return Response(
            {"results": NodeEventOut(page.results, many=True).data, "next_page_token": page.next_page_token}
        )


# ---- end of life: sanitisation records, checklist steps, custody (operator API)


class SanitizationRecordCreate(OpsView):
    ops_action = "drive.record_sanitization"

    @extend_schema(
        operation_id="ops_drive_sanitization_record_create",
        request=SanitizationRecordIn,
        responses={201: SanitizationRecordOut},
        parameters=[IDEMPOTENCY_HEADER],
        summary="Record a drive's sanitisation (operator-entered, with evidence)",
    )
    def post(self, request, pk):
        key = read_key(request)
        drive = get_object_or_404(Drive.objects.all(), pk=uuid_or_404(pk))
        body = SanitizationRecordIn(data=request.data)
        body.is_valid(raise_exception=True)

        def perform():
            record = sanitization.record_sanitization(drive=drive, actor=request.user.actor, **body.validated_data)
            return Response(SanitizationRecordOut(record).data, status=status.HTTP_201_CREATED)

        return idempotent_create(request, scope=request.user.idempotency_scope, key=key, perform=perform)


class CsvBodyParser(parsers.BaseParser):
    """A text/csv request body, as bytes, read no further than one byte past the service's limit
    (the service refuses anything longer with a clear 400)."""

    media_type = "text/csv"

    def parse(self, stream, media_type=None, parser_context=None):
        return stream.read(MAX_BYTES + 1) if stream is not None else b""


class SiteGridIntensity(OpsView):
    ops_action = "site.upload_grid_profile"
    parser_classes = [CsvBodyParser]

    @extend_schema(
        operation_id="ops_site_grid_intensity_upload",
        request={"text/csv": OpenApiTypes.STR},
        responses={200: GridProfileOut},
        summary="Upload a site's hourly grid carbon intensity (CSV: hour,kg_co2e_per_kwh)",
    )
    def put(self, request, pk):
        site = Site.objects.filter(pk=uuid_or_404(pk)).first()
        if site is None:
            raise Problem(404, "not_found", "No site with this id; the admin lists the sites.")
        summary = upload_grid_profile(site=site, raw=request.data or b"", actor=request.user.actor)
        return Response(GridProfileOut(summary).data)


def data_handling_body(node: Node) -> dict:
    cert = certificate_for(node.pk)
    s = cert["status"]
    return DataHandlingOut(
        {
            "node_id": node.pk,
            "hostname": node.hostname,
            "lifecycle": node.lifecycle,
            "drives_total": s.drives_total,
            "drives_sanitized": s.drives_sanitized,
            "unsanitized_drives": s.unsanitized,
            "bmc_reset_at": s.bmc_reset_at,
            "bmc_reset_evidence": s.bmc_reset_evidence,
            "asset_tags_removed_at": s.asset_tags_removed_at,
            "custody_transfers": s.custody_transfers,
            "retire_missing": s.retire_missing,
            "dispose_missing": s.dispose_missing,
            "destination": s.gate.destination,
            "destination_basis": [b.as_dict() for b in s.gate.basis],
            "custody": [
                {
                    "id": c.transfer.pk,
                    "at": c.transfer.at,
                    "from_party": c.transfer.from_party,
                    "to_party": c.transfer.to_party,
                    "destination_kind": c.destination_kind,
                    "leaves_organisation": c.leaves_organisation,
                    "required_method": c.required_method,
                    "stored_required_method": c.transfer.required_method,
                    "document_ref": c.transfer.document_ref,
                    "kind": c.transfer.kind,
                }
                for c in cert["custody"]
            ],
            "certificate": {"available": cert["complete"], "refusals": cert["refusals"]},
            "inventory_reported_at": s.gate.inventory_reported_at,
            "drives": [d.as_dict() for d in s.gate.drives],
            "rma_gate": gate_status([node.pk], RMA)[node.pk].as_dict(),
        }
    ).data


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
    serializer_class = BmcResetIn
    ops_action = "node.record_bmc_reset"

    @extend_schema(
        operation_id="ops_node_bmc_reset",
        request=BmcResetIn,
        responses={201: DataHandlingOut},
        parameters=[IDEMPOTENCY_HEADER],
        summary="Reset the BMC to factory defaults over Redfish (or record a reset done by hand)",
    )
    def post(self, request, pk):
        key = read_key(request)
        node = get_object_or_404(Node.objects.all(), pk=uuid_or_404(pk))
        body = BmcResetIn(data=request.data)
        body.is_valid(raise_exception=True)
        if not body.validated_data["manual"]:
            # The Redfish reset runs outside the request's transaction, so a BMC's refusal stays on
            # the node's trail as evidence even though the request is answered 409. Repeating it is
            # harmless: a node whose BMC was already reset is not asked again.
            try:
                bmc_disposal.reset_bmc_for_disposal(
                    node=node, actor=request.user.actor, reason=body.validated_data["reason"]
                )
            except ActionRefused as exc:
                raise Problem(409, exc.code, exc.detail, extra=exc.extra) from None
            return idempotent_create(
                request,
                scope=request.user.idempotency_scope,
                key=key,
                perform=lambda: Response(data_handling_body(node), status=status.HTTP_201_CREATED),
            )
        return super().post(request, pk)

    def record(self, node, request, data):
        bmc_disposal.reset_bmc_for_disposal(node=node, actor=request.user.actor, reason=data["reason"], manual=True)


class AssetTagsRemoved(NodeChecklistStep):
    ops_action = "node.record_asset_tags_removed"

    @extend_schema(
        operation_id="ops_node_asset_tags_removed",
        request=ReasonIn,
        responses={201: DataHandlingOut},
        parameters=[IDEMPOTENCY_HEADER],
        summary="Record that the node's asset tags were removed",
    )
    def post(self, request, pk):
        return super().post(request, pk)

    def record(self, node, request, data):
        sanitization.record_asset_tags_removed(node=node, actor=request.user.actor, reason=data["reason"])


class CustodyTransfers(NodeChecklistStep):
    serializer_class = CustodyTransferIn
    ops_action = "node.record_custody_transfer"

    @extend_schema(
        operation_id="ops_node_custody_transfer_create",
        request=CustodyTransferIn,
        responses={201: DataHandlingOut},
        parameters=[IDEMPOTENCY_HEADER],
        summary="Record a chain-of-custody transfer to a named kind of party (its kind decides the drives' method)",
    )
    def post(self, request, pk):
        return super().post(request, pk)

    def record(self, node, request, data):
        try:
            sanitization.record_custody_transfer(node=node, actor=request.user.actor, **data)
        except sanitization.CustodyRefused as exc:
            if exc.code == "invalid":
                raise Problem(400, "validation_error", exc.detail) from None
            raise Problem(
                409,
                exc.code,
                exc.detail,
                extra={
                    "lacking_drives": [d.serial for d in exc.status.lacking] if exc.status else [],
                    "drives": [d.as_dict() for d in exc.status.drives] if exc.status else [],
                    "destination": exc.status.destination if exc.status else None,
                    "basis": [b.as_dict() for b in exc.status.basis] if exc.status else [],
                },
            ) from None


class DataHandling(OpsView):
    @extend_schema(
        operation_id="ops_node_data_handling",
        responses={200: DataHandlingOut},
        summary="The node's data-handling checklist: drives sanitised, BMC reset, tags, custody",
    )
    def get(self, request, pk):
        node = get_object_or_404(Node.objects.all(), pk=uuid_or_404(pk))
        return Response(data_handling_body(node))
