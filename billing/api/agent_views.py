"""Node-agent routes of the billing app: meter ingest into the ledger."""

from drf_spectacular.utils import extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from billing.api.serializers import MeterBatchSerializer, MeterResultSerializer
from billing.services.ingest import (
    EventConflict,
    IngestValidationError,
    ingest_meter_events,
)
from core.api.authentication import LedgerAgentTokenAuthentication
from core.api.permissions import IsAgent
from core.api.problems import Problem


class MeterEventsView(APIView):
    """Signature-only auth (token and grant) and ledger-only writes: never touches the control-plane
    database. Events their grant does not allow are answered in `rejected`, never charged."""

    authentication_classes = [LedgerAgentTokenAuthentication]
    permission_classes = [IsAgent]

    @extend_schema(request=MeterBatchSerializer, responses={202: MeterResultSerializer}, tags=["agent"])
    def post(self, request):
        body = request.data
        events = body.get("events") if isinstance(body, dict) else None
        try:
            result = ingest_meter_events(node_id=request.user.node_id, events=events)
        except IngestValidationError as exc:
            raise Problem(
                400,
                "validation_error",
                "Some meter events are invalid; see errors. Nothing was stored.",
                errors=exc.errors,
            ) from None
        except EventConflict as exc:
            raise Problem(
                422,
                "event_conflict",
                "These event ids were already recorded with different content; an event id names one "
                "event forever. Nothing in this batch was stored; send new ids for new events.",
                extra={"event_ids": exc.event_ids},
                errors=[{"field": "event_id", "message": eid} for eid in exc.event_ids],
            ) from None
        return Response(
            {
                "accepted": result.accepted,
                "duplicates": result.duplicates,
                "rejected": [{"event_id": r.event_id, "code": r.code, "detail": r.detail} for r in result.rejected],
            },
            status=202,
        )
