"""Node agent API: what the node should do now, and what it did (docs/api.md, "Node agent API")."""

import hashlib
import json

from django.core.serializers.json import DjangoJSONEncoder
from django.utils import timezone
from django.utils.http import parse_etags, quote_etag
from drf_spectacular.utils import extend_schema
from rest_framework import exceptions
from rest_framework.response import Response
from rest_framework.views import APIView

from billing.selectors import metering_grants_for_node
from core.api.authentication import AgentTokenAuthentication
from core.api.permissions import IsAgent
from core.api.problems import Problem
from fleet.choices import AgentActionState
from fleet.models import Node, NodeAgentAction
from fleet.services.agent_results import UnknownAction, record_action_result
from fleet.services.lifecycle import GONE
from tenants.selectors import live_allocation_of_node

from .serializers import ActionResultIn, DesiredStateOut


class AgentView(APIView):
    authentication_classes = [AgentTokenAuthentication]
    permission_classes = [IsAgent]

    def node(self, request) -> Node:
        node = Node.objects.select_related("node_type").filter(pk=request.user.node_id).first()
        if node is None:
            raise Problem(
                404,
                "unknown_node",
                "This agent token names a node the control plane does not know; "
                "mint a token for an enrolled node with manage.py create_token --agent HOSTNAME.",
            )
        if node.lifecycle in GONE:
            # Also on the revocation list; this holds even if writing that list failed.
            raise exceptions.AuthenticationFailed(f"Revoked agent token: {node.hostname} is {node.lifecycle}.")
        return node


class DesiredStateView(AgentView):
    @extend_schema(
        responses={200: DesiredStateOut, 304: None},
        summary="What the control plane wants this node to do now",
        description="Carries an `ETag`; sent back as `If-None-Match`, an unchanged state answers "
        "`304 Not Modified` with no body (the grants in it change once an hour, so a quiet node's "
        "polls are 304s).",
    )
    def get(self, request):
        node = self.node(request)
        live = live_allocation_of_node(node)
        actions = NodeAgentAction.objects.filter(node=node, state=AgentActionState.PENDING).order_by("created_at")
        state = {
            "lifecycle": node.lifecycle,
            "allocation_id": str(live[0]) if live else None,
            "tenant_id": str(live[1]) if live else None,
            "actions": [{"id": str(a.pk), "action": a.action, "params": a.params} for a in actions],
            "sku": node.node_type.slug,
            "gpus": node.node_type.gpus_per_node,
            "metering_grants": metering_grants_for_node(node, now=timezone.now()),
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
