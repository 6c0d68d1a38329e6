"""Billing API views: the tenant's usage and invoices (JSON and CSV), and the operator's billing
runs and corrections (credit notes, re-issue, manual adjustments)."""

from django.http import Http404, HttpResponse
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from billing.api.serializers import (
    AdjustmentRequestSerializer,
    AdjustmentSerializer,
    AllocationEnergySerializer,
    BillingRunRequestSerializer,
    BillingRunSerializer,
    CreditNoteRequestSerializer,
    CreditNoteSerializer,
    InvoicePageSerializer,
    InvoiceSerializer,
    ReissueRequestSerializer,
    UsagePageSerializer,
    UsageRowSerializer,
)
from billing.exports import invoice_csv
from billing.models import Adjustment, AdjustmentKind, BillingRun
from billing.periods import format_period, parse_period
from billing.selectors import default_usage_window, invoice_for_tenant, invoices_for_tenant, usage_by_sku
from billing.services.corrections import CorrectionError, CreditRequest, issue_credit_note, reissue_invoice
from billing.services.credits import CreditError, record_manual_adjustment
from billing.services.runs import BillingRunError, run_billing
from core.api.idempotency import idempotent_create, read_key
from core.api.lookups import uuid_or_404
from core.api.pagination import paginate
from core.api.permissions import IsOperator, IsTenant
from core.api.problems import Problem
from core.api.timestamps import parse_rfc3339
from tenants.energy import allocation_energy

IDEMPOTENCY_KEY = OpenApiParameter("Idempotency-Key", location=OpenApiParameter.HEADER, required=True)


def _billing_problem(exc) -> Problem:
    if isinstance(exc, BillingRunError):
        headers = {"Retry-After": "60"} if exc.code == "billing_run_in_progress" else None
        return Problem(409, exc.code, exc.detail, headers=headers)
    if isinstance(exc, CorrectionError):
        return Problem(exc.status, exc.code, exc.detail, errors=exc.errors)
    return Problem(400 if exc.code == "validation_error" else 409, exc.code, exc.detail)


def _ops_page(rows, serializer_class, request, scope: str) -> Response:
    page = paginate(rows, request=request, scope=scope)
    return Response(
        {"results": serializer_class(page.results, many=True).data, "next_page_token": page.next_page_token}
    )


class BillingRunsView(APIView):
    permission_classes = [IsOperator]
    ops_action = "billing_run.create"

    @extend_schema(
        operation_id="ops_billing_runs_list",
        summary="Billing runs, newest first (keyset pages: page_size, page_token)",
        responses={200: BillingRunSerializer(many=True)},
        tags=["billing"],
    )
    def get(self, request):
        return _ops_page(BillingRun.objects.all(), BillingRunSerializer, request, "ops:billing-runs")

    @extend_schema(
        request=BillingRunRequestSerializer,
        responses={201: BillingRunSerializer, 200: BillingRunSerializer},
        parameters=[IDEMPOTENCY_KEY],
        tags=["ops"],
    )
    def post(self, request):
        key = read_key(request)
        payload = BillingRunRequestSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        period = parse_period(payload.validated_data["period"])

        def perform():
            try:
                outcome = run_billing(
                    period=period, finalize=payload.validated_data["finalize"], actor=request.user.actor
                )
            except BillingRunError as exc:
                raise _billing_problem(exc) from None
            # 200: the period was already finalized and nothing changed.
            return Response(BillingRunSerializer(outcome.run).data, status=201 if outcome.created else 200)

        return idempotent_create(request, scope=request.user.idempotency_scope, key=key, perform=perform)


class InvoiceReissueView(APIView):
    permission_classes = [IsOperator]
    ops_action = "invoice.reissue"

    @extend_schema(
        request=ReissueRequestSerializer, responses={201: InvoiceSerializer}, parameters=[IDEMPOTENCY_KEY], tags=["ops"]
    )
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

    @extend_schema(
        request=CreditNoteRequestSerializer,
        responses={201: CreditNoteSerializer},
        parameters=[IDEMPOTENCY_KEY],
        tags=["ops"],
    )
    def post(self, request, pk):
        key = read_key(request)
        invoice_id = uuid_or_404(pk)
        payload = CreditNoteRequestSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        data = payload.validated_data

        def perform():
            try:
                note = issue_credit_note(
                    by=request.user,
                    invoice_id=invoice_id,
                    reason=data["reason"],
                    requests=[CreditRequest(r["position"], r["amount"]) for r in data["lines"]],
                )
            except CorrectionError as exc:
                raise _billing_problem(exc) from None
            return Response(CreditNoteSerializer(note).data, status=201)

        return idempotent_create(request, scope=request.user.idempotency_scope, key=key, perform=perform)


class AdjustmentsView(APIView):
    permission_classes = [IsOperator]
    ops_action = "adjustment.create"

    @extend_schema(
        operation_id="ops_billing_adjustments_list",
        summary="Manual adjustments, newest first (keyset pages: page_size, page_token)",
        responses={200: AdjustmentSerializer(many=True)},
        tags=["billing"],
    )
    def get(self, request):
        rows = Adjustment.objects.filter(kind=AdjustmentKind.MANUAL)
        return _ops_page(rows, AdjustmentSerializer, request, "ops:billing-adjustments")

    @extend_schema(
        request=AdjustmentRequestSerializer,
        responses={201: AdjustmentSerializer},
        parameters=[IDEMPOTENCY_KEY],
        tags=["ops"],
    )
    def post(self, request):
        key = read_key(request)
        payload = AdjustmentRequestSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        data = payload.validated_data

        def perform():
            try:
                adjustment = record_manual_adjustment(
                    by=request.user,
                    tenant_id=data["tenant_id"],
                    period=parse_period(data["period"]),
                    amount=data["amount"],
                    reason=data["reason"],
                    reference=data["reference"],
                )
            except CreditError as exc:
                raise _billing_problem(exc) from None
            return Response(AdjustmentSerializer(adjustment).data, status=201)

        return idempotent_create(request, scope=request.user.idempotency_scope, key=key, perform=perform)


# ---- tenant API: usage and invoices

INVOICE_ID = OpenApiParameter("id", OpenApiTypes.UUID, OpenApiParameter.PATH, description="invoice id")


class UsageView(APIView):
    permission_classes = [IsTenant]

    @extend_schema(
        parameters=[OpenApiParameter("start", OpenApiTypes.DATETIME), OpenApiParameter("end", OpenApiTypes.DATETIME)],
        responses={200: UsagePageSerializer},
        tags=["billing"],
    )
    def get(self, request):
        start, end = default_usage_window(timezone.now())
        errors = []
        bounds = {"start": start, "end": end}
        for name in bounds:
            raw = request.query_params.get(name)
            if raw:
                try:
                    bounds[name] = parse_rfc3339(raw)
                except (ValueError, TypeError) as exc:
                    errors.append({"field": name, "message": str(exc)})
        if not errors and bounds["end"] <= bounds["start"]:
            errors.append({"field": "end", "message": "must be after start"})
        if errors:
            raise Problem(
                400, "validation_error", "Give start and end as RFC 3339 times, start before end.", errors=errors
            )
        tenant_id = request.user.tenant_id
        report = usage_by_sku(tenant_id=tenant_id, start=bounds["start"], end=bounds["end"])
        energy = allocation_energy(tenant_id=tenant_id, start=bounds["start"], end=bounds["end"])
        return Response(
            {
                "results": UsageRowSerializer(report.rows, many=True).data,
                "as_of": report.as_of.isoformat().replace("+00:00", "Z"),
                "next_page_token": None,
                "energy": AllocationEnergySerializer(energy, many=True).data,
                "archived_months": [format_period(p) for p in report.archived_periods],
            }
        )


class InvoiceListView(APIView):
    permission_classes = [IsTenant]

    @extend_schema(operation_id="invoices_list", responses={200: InvoicePageSerializer}, tags=["billing"])
    def get(self, request):
        tenant_id = request.user.tenant_id
        page = paginate(invoices_for_tenant(tenant_id), request=request, scope=f"tenant:{tenant_id}")
        return Response(
            {"results": InvoiceSerializer(page.results, many=True).data, "next_page_token": page.next_page_token}
        )


def _invoice(request, pk):
    invoice = invoice_for_tenant(tenant_id=request.user.tenant_id, invoice_id=uuid_or_404(pk))
    if invoice is None:
        raise Http404("no such invoice")
    return invoice


class InvoiceDetailView(APIView):
    permission_classes = [IsTenant]

    @extend_schema(
        operation_id="invoices_retrieve", parameters=[INVOICE_ID], responses={200: InvoiceSerializer}, tags=["billing"]
    )
    def get(self, request, pk):
        return Response(InvoiceSerializer(_invoice(request, pk)).data)


class InvoiceCsvView(APIView):
    permission_classes = [IsTenant]

    @extend_schema(parameters=[INVOICE_ID], responses={(200, "text/csv"): OpenApiTypes.STR}, tags=["billing"])
    def get(self, request, pk):
        invoice = _invoice(request, pk)
        response = HttpResponse(invoice_csv(invoice), content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="invoice-{invoice.number or invoice.pk}.csv"'
        return response
