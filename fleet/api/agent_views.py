"""Node agent API: what the node should do now, and what it did (docs/api.md, "Node agent API")."""

import hashlib
import json

from django.core.serializers.json import DjangoJSONEncoder
from django.utils import timezone
from django.utils.http import parse_etags, quote_etag
from drf_spectacular.utils import extend_schema
from rest_framework import exceptions, serializers
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from billing.selectors import agent_node_state, metering_grants
from core.api.authentication import AgentTokenAuthentication
from core.api.permissions import IsAgent
from core.api.problems import Problem
from core.api.throttles import (
    client_address,
    note_failed_authentication,
    refuse_if_too_many_failed_authentications,
)
from core.services.agent_credentials import HandoffRefused, claim_identity_handoff
from fleet.choices import AgentActionState, Lifecycle
from fleet.models import Node, NodeAgentAction
from fleet.services.agent_results import UnknownAction, record_action_result
from fleet.services.lifecycle import GONE
from fleet.services.software_inventory import Component, store_software_inventory
from tenants.selectors import node_access

from .serializers import ActionResultIn, DesiredStateOut, SoftwareInventoryIn


class AgentView(APIView):
    authentication_classes = [AgentTokenAuthentication]
    permission_classes = [IsAgent]

    def node(self, request) -> Node:
        node = Node.objects.select_related("node_type").filter(pk=request.user.node_id).first()
        if node is None:
            raise _unknown_node()
        if node.lifecycle in GONE:
            raise _gone(node.hostname, node.lifecycle)
        return node


def _unknown_node() -> Problem:
    return Problem(
        404,
        "unknown_node",
        "This agent token names a node the control plane does not know; "
        "mint a token for an enrolled node with manage.py create_token --agent HOSTNAME.",
    )


def _gone(hostname: str, lifecycle: str) -> exceptions.AuthenticationFailed:
    # Also on the revocation list; this holds even if writing that list failed.
    return exceptions.AuthenticationFailed(f"Revoked agent token: {hostname} is {lifecycle}.")


# Node states in which the agent holds (or is setting up) the tenant's access.
ACCESS_STATES = frozenset({Lifecycle.PROVISIONING, Lifecycle.ACTIVE})


class DesiredStateView(AgentView):
    @extend_schema(
        responses={200: DesiredStateOut, 304: None},
        summary="What the control plane wants this node to do now",
        description="Carries an `ETag`; sent back as `If-None-Match`, an unchanged state answers "
        "`304 Not Modified` with no body (the grants in it change once an hour, so a quiet node's "
        "polls are 304s).",
    )
    def get(self, request):
        node_id = request.user.node_id
        node = agent_node_state(node_id)  # one statement: every agent polls every 10 s
        if node is None:
            raise _unknown_node()
        if node.lifecycle in GONE:
            raise _gone(node.hostname, node.lifecycle)
        actions = (
            NodeAgentAction.objects.filter(node_id=node_id, state=AgentActionState.PENDING).order_by("created_at")
            if node.has_pending_actions
            else ()
        )
        grants = metering_grants(node_id, node.memberships, now=timezone.now())
        # Only a node that serves a tenant now reads its access (public keys, user, image, mounts).
        access = (
            node_access(node.memberships[0][0], state=node.allocation_state, revision=node.access_revision)
            if node.memberships and node.lifecycle in ACCESS_STATES
            else None
        )
        state = {
            "lifecycle": node.lifecycle,
            "allocation_id": grants[0]["allocation_id"] if grants else None,
            "tenant_id": grants[0]["tenant_id"] if grants else None,
            "actions": [{"id": str(a.pk), "action": a.action, "params": a.params} for a in actions],
            "sku": node.sku,
            "gpus": node.gpus,
            "metering_grants": grants,
            "access": access,
        }
        etag = _etag(state)
        wanted = parse_etags(request.headers.get("If-None-Match", ""))
        if etag in wanted or "*" in wanted:
            return Response(status=304, headers={"ETag": etag})
        return Response(state, headers={"ETag": etag})


def _etag(state: dict) -> str:
    """A strong validator of the body: a digest of its canonical JSON."""
    canonical = json.dumps(state, sort_keys=True, separators=(",", ":"), cls=DjangoJSONEncoder)
    return quote_etag(hashlib.sha256(canonical.encode()).hexdigest()[:32])


class ActionResultsView(AgentView):
    @extend_schema(request=ActionResultIn, responses={202: None}, summary="Report the outcome of an action")
    def post(self, request):
        body = ActionResultIn(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        try:
            recorded = record_action_result(
                node_id=request.user.node_id,
                action_id=data["action_id"],
                action=data["action"],
                status=data["status"],
                detail=data["detail"],
                output=data["output"],
                finished_at=data["finished_at"],
            )
        except UnknownAction:
            raise Problem(
                404,
                "not_found",
                "This node has no such action; report results only for actions listed in its desired state.",
            ) from None
        return Response(
            {"action_id": str(recorded.action.pk), "state": recorded.action.state, "duplicate": recorded.duplicate},
            status=202,
        )


class SoftwareInventoryView(AgentView):
    """The node's software and firmware stack as the agent reads it (a separate, infrequent
    report: versions change on upgrades, not every heartbeat)."""

    @extend_schema(
        request=SoftwareInventoryIn, responses={202: None}, summary="Report the node's software and firmware stack"
    )
    def post(self, request):
        body = SoftwareInventoryIn(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        stored = store_software_inventory(
            node=self.node(request),
            components=[Component(**c) for c in data["components"]],
            observed_at=data["observed_at"],
        )
        return Response({"stored": stored.stored, "stale": stored.stale}, status=202)


class IdentityHandoffIn(serializers.Serializer):
    node_id = serializers.UUIDField()
    code = serializers.CharField(max_length=128, trim_whitespace=False)


class IdentityHandoffOut(serializers.Serializer):
    node_id = serializers.UUIDField()
    token = serializers.CharField()


class IdentityHandoffView(APIView):
    """The one way a node gets its identity after a tenancy boundary: its wipe image presents
    the one-time code it was served on the provisioning channel and receives the new agent
    token, once (docs/agent.md, "Identity per tenancy"). No bearer token: the code is the
    credential, so each refusal counts toward the address's failed-authentication budget."""

    authentication_classes: list = []
    permission_classes = [AllowAny]

    @extend_schema(
        request=IdentityHandoffIn,
        responses={200: IdentityHandoffOut},
        summary="Claim the node's new agent identity with its one-time handoff code",
        tags=["agent"],
    )
    def post(self, request):
        refuse_if_too_many_failed_authentications(request)
        body = IdentityHandoffIn(data=request.data)
        body.is_valid(raise_exception=True)
        node_id = body.validated_data["node_id"]
        try:
            token = claim_identity_handoff(
                node_id=node_id, code=body.validated_data["code"], address=client_address(request)
            )
        except HandoffRefused:
            note_failed_authentication(request)
            raise Problem(
                401,
                "handoff_refused",
                "This handoff code does not open a waiting identity for that node (unknown, already claimed or "
                "expired). Each code works once, from the node's wipe image; an operator can re-key the node with "
                "manage.py create_token --agent HOSTNAME.",
            ) from None
        return Response({"node_id": str(node_id), "token": token})
