"""Operator API of the out-of-band path: a node's BMC record (credentials write-only), its
power actions, and enrolment by BMC discovery. Thin: services do the work (docs/bmc.md)."""

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.response import Response

from core.api.idempotency import idempotent_create, read_key
from core.api.pagination import paginate
from core.api.problems import Problem
from core.api.schema import PAGE_PARAMETERS, page_of
from fleet.models import NodeType, Rack
from fleet.selectors import bmc_status
from fleet.selectors.bmc import bmc_enrolled_nodes
from fleet.services.bmc_credentials import set_bmc
from fleet.services.bmc_enrolment import enrol_from_bmcs
from fleet.services.power_actions import request_power_action, send_power_actions

from .serializers import (
    BMCEnrolledNodeOut,
    BMCEnrolmentIn,
    BMCIn,
    BMCOut,
    EnrolmentOut,
    PowerActionIn,
    bmc_body,
)
from .views import IDEMPOTENCY_HEADER, OpsView, _node_or_404


class NodeBMCView(OpsView):
    ops_action = "node.bmc_edit"

    @extend_schema(operation_id="ops_node_bmc", responses=BMCOut, summary="A node's BMC record and power actions")
    def get(self, request, pk):
        node = _node_or_404(pk)
        return Response(bmc_body(node, bmc_status(node)))

    @extend_schema(
        operation_id="ops_node_bmc_set",
        request=BMCIn,
        responses=BMCOut,
        summary="Set a node's BMC address and (write-only) credentials",
    )
    def put(self, request, pk):
        node = _node_or_404(pk)
        body = BMCIn(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        set_bmc(
            node=node,
            redfish_url=data["redfish_url"],
            system_path=data["system_path"],
            username=data.get("username"),
            password=data.get("password"),
            address=data.get("address"),
            mac=data.get("mac"),
            tls_ca_pem=data.get("tls_ca_pem"),
            tls_pin_sha256=data.get("tls_pin_sha256"),
            actor=request.user.actor,
            reason=data["reason"],
        )
        return Response(bmc_body(node, bmc_status(node)))


class NodePowerView(OpsView):
    ops_action = "node.power"

    @extend_schema(
        operation_id="ops_node_power",
        request=PowerActionIn,
        responses={202: BMCOut},
        parameters=[IDEMPOTENCY_HEADER],
        summary="Power a node on, off or cycle it through its BMC",
    )
    def post(self, request, pk):
        key = read_key(request)
        node = _node_or_404(pk)
        body = PowerActionIn(data=request.data)
        body.is_valid(raise_exception=True)
        asked = []

        def perform():
            action = request_power_action(
                node=node,
                action=body.validated_data["action"],
                actor=request.user.actor,
                reason=body.validated_data["reason"],
                user=request.user.user,
            )
            asked.append(action.pk)
            return Response(bmc_body(node, bmc_status(node)), status=status.HTTP_202_ACCEPTED)

        response = idempotent_create(request, scope=request.user.idempotency_scope, key=key, perform=perform)
        if not asked or response.status_code >= 400:
            return response  # a replay answers as the first time; a refusal sends nothing
        # The ask has committed: now the BMC is called, outside any transaction, and the answer
        # (accepted or refused, with why) is in the response.
        send_power_actions(asked, actor=request.user.actor)
        node.refresh_from_db()
        return Response(bmc_body(node, bmc_status(node)), status=status.HTTP_202_ACCEPTED)


class BMCEnrolmentView(OpsView):
    ops_action = "fleet.enrol_from_bmcs"

    @extend_schema(
        operation_id="ops_bmc_enrolments_list",
        summary="Nodes enrolled from their BMCs, newest first (keyset pages)",
        parameters=PAGE_PARAMETERS,
        responses={200: page_of(BMCEnrolledNodeOut, "BMCEnrolledNodePage")},
    )
    def get(self, request):
        page = paginate(bmc_enrolled_nodes(), request=request, scope="ops:bmc-enrolments")
        return Response(
            {"results": BMCEnrolledNodeOut(page.results, many=True).data, "next_page_token": page.next_page_token}
        )

    @extend_schema(
        operation_id="ops_bmc_enrolment",
        request=BMCEnrolmentIn,
        responses={201: EnrolmentOut},
        summary="Enrol the systems found at a range of BMC addresses as nodes in `enrolled`",
    )
    def post(self, request):
        body = BMCEnrolmentIn(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        rack = Rack.objects.filter(pk=data["rack_id"]).first()
        node_type = NodeType.objects.filter(slug=data["node_type"]).first()
        if rack is None or node_type is None:
            raise Problem(
                400,
                "validation_error",
                "Unknown rack or node type.",
                errors=[{"field": "rack_id" if rack is None else "node_type", "message": "not found"}],
            )
        # Not wrapped in the idempotency transaction: discovery talks to every BMC first, and a
        # repeated enrolment is harmless (systems already in the fleet are skipped by serial).
        report = enrol_from_bmcs(
            addresses=data["addresses"],
            scheme=data["scheme"],
            username=data["username"],
            password=data["password"],
            rack=rack,
            node_type=node_type,
            hostname_prefix=data["hostname_prefix"],
            u_start=data["u_start"],
            actor=request.user.actor,
        )
        return Response(EnrolmentOut(report.as_dict()).data, status=status.HTTP_201_CREATED)
