"""Operator views of the billing app: billing runs and corrections (credit notes, re-issue,
manual adjustments). Thin: validate, call one service, map its domain error to a problem."""
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from billing.api.serializers import (
    AdjustmentRequestSerializer,
    AdjustmentSerializer,
    BillingRunRequestSerializer,
    BillingRunSerializer,
    CreditNoteRequestSerializer,
    CreditNoteSerializer,
    InvoiceSerializer,
    ReissueRequestSerializer,
)
from billing.periods import parse_period
from billing.services.corrections import CorrectionError, CreditRequest, issue_credit_note, reissue_invoice
from billing.services.credits import CreditError, record_manual_adjustment
from billing.services.runs import BillingRunError, run_billing
from core.api.idempotency import idempotent_create, read_key
from core.api.lookups import uuid_or_404
from core.api.permissions import IsOperator
from core.api.problems import Problem

IDEMPOTENCY_KEY = OpenApiParameter("Idempotency-Key", location=OpenApiParameter.HEADER, required=True)


def _billing_problem(exc) -> Problem:
    if isinstance(exc, BillingRunError):
        headers = {"Retry-After": "60"} if exc.code == "billing_run_in_progress" else None
        return Problem(409, exc.code, exc.detail, headers=headers)
    if isinstance(exc, CorrectionError):
        return Problem(exc.status, exc.code, exc.detail, errors=exc.errors)
    return Problem(400 if exc.code == "validation_error" else 409, exc.code, exc.detail)


class BillingRunsView(APIView):
    permission_classes = [IsOperator]
    ops_action = "billing_run.create"

    @extend_schema(request=BillingRunRequestSerializer, responses={201: BillingRunSerializer, 200: BillingRunSerializer},
                   parameters=[IDEMPOTENCY_KEY], tags=["ops"])
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
                raise _billing_problem(exc) from None
            # 200: the period was already finalized and nothing changed.
            return Response(BillingRunSerializer(outcome.run).data, status=201 if outcome.created else 200)

        return idempotent_create(request, scope=request.user.idempotency_scope, key=key, perform=perform)


class InvoiceReissueView(APIView):
    permission_classes = [IsOperator]
    ops_action = "invoice.reissue"

    @extend_schema(request=ReissueRequestSerializer, responses={201: InvoiceSerializer}, parameters=[IDEMPOTENCY_KEY],
                   tags=["ops"])
    def post(self, request, pk):
        key = read_key(request)
        invoice_id = uuid_or_404(pk)
        payload = ReissueRequestSerializer(data=request.data)
        payload.is_valid(raise_exception=True)

        def perform():
            try:
                new = reissue_invoice(by=request.user, invoice_id=invoice_id, reason=payload.validated_data["reason"])
            except (CorrectionError, BillingRunError) as exc:
                raise _billing_problem(exc) from None
            return Response(InvoiceSerializer(new).data, status=201)

        return idempotent_create(request, scope=request.user.idempotency_scope, key=key, perform=perform)


class CreditNotesView(APIView):
    permission_classes = [IsOperator]
    ops_action = "credit_note.create"

    @extend_schema(request=CreditNoteRequestSerializer, responses={201: CreditNoteSerializer},
                   parameters=[IDEMPOTENCY_KEY], tags=["ops"])
    def post(self, request, pk):
        key = read_key(request)
        invoice_id = uuid_or_404(pk)
        payload = CreditNoteRequestSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        data = payload.validated_data

        def perform():
            try:
                note = issue_credit_note(by=request.user, invoice_id=invoice_id, reason=data["reason"],
                                         requests=[CreditRequest(r["position"], r["amount"]) for r in data["lines"]])
            except CorrectionError as exc:
                raise _billing_problem(exc) from None
            return Response(CreditNoteSerializer(note).data, status=201)

        return idempotent_create(request, scope=request.user.idempotency_scope, key=key, perform=perform)


class AdjustmentsView(APIView):
    permission_classes = [IsOperator]
    ops_action = "adjustment.create"

    @extend_schema(request=AdjustmentRequestSerializer, responses={201: AdjustmentSerializer},
                   parameters=[IDEMPOTENCY_KEY], tags=["ops"])
    def post(self, request):
        key = read_key(request)
        payload = AdjustmentRequestSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        data = payload.validated_data

        def perform():
            try:
                adjustment = record_manual_adjustment(by=request.user, tenant_id=data["tenant_id"],
                                                      period=parse_period(data["period"]), amount=data["amount"],
                                                      reason=data["reason"], reference=data["reference"])
            except CreditError as exc:
                raise _billing_problem(exc) from None
            return Response(AdjustmentSerializer(adjustment).data, status=201)

        return idempotent_create(request, scope=request.user.idempotency_scope, key=key, perform=perform)

