"""Operator routes of the billing app: billing runs."""
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from billing.api.serializers import BillingRunRequestSerializer, BillingRunSerializer
from billing.periods import parse_period
from billing.services.runs import BillingRunError, run_billing
from core.api.idempotency import idempotent_create, read_key
from core.api.permissions import IsOperator
from core.api.problems import Problem


class BillingRunsView(APIView):
    permission_classes = [IsOperator]
    ops_action = "billing_run.create"

    @extend_schema(request=BillingRunRequestSerializer, responses={201: BillingRunSerializer, 200: BillingRunSerializer},
                   parameters=[OpenApiParameter("Idempotency-Key", location=OpenApiParameter.HEADER, required=True)],
                   tags=["ops"])
    def post(self, request):
        key = read_key(request)
        payload = BillingRunRequestSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        period = parse_period(payload.validated_data["period"])

        def perform():
            try:
                outcome = run_billing(period=period, finalize=payload.validated_data["finalize"],
                                      actor=request.user.actor)
            except BillingRunError as exc:
                headers = {"Retry-After": "60"} if exc.code == "billing_run_in_progress" else None
                raise Problem(409, exc.code, exc.detail, headers=headers) from None
            # 200: the period was already finalized and nothing changed.
            return Response(BillingRunSerializer(outcome.run).data, status=201 if outcome.created else 200)

        return idempotent_create(request, scope=request.user.idempotency_scope, key=key, perform=perform)
