"""Tenant routes of the billing app: usage, invoices (JSON and CSV)."""
import csv
import io

from django.http import Http404, HttpResponse
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from billing.api.agent_views import MeterEventsView
from billing.api.serializers import (
    AllocationEnergySerializer,
    InvoicePageSerializer,
    InvoiceSerializer,
    UsagePageSerializer,
    UsageRowSerializer,
)
from billing.api.views import AdjustmentsView, BillingRunsView, CreditNotesView, InvoiceReissueView
from billing.periods import format_period
from billing.selectors import default_usage_window, invoice_for_tenant, invoices_for_tenant, usage_by_sku
from core.api.lookups import uuid_or_404
from core.api.pagination import paginate
from core.api.permissions import IsTenant
from core.api.problems import Problem
from core.api.routes import api_route
from core.api.timestamps import parse_rfc3339
from core.exports import safe_row
from tenants.energy import allocation_energy

INVOICE_ID = OpenApiParameter("id", OpenApiTypes.UUID, OpenApiParameter.PATH, description="invoice id")


class UsageView(APIView):
    permission_classes = [IsTenant]

    @extend_schema(parameters=[OpenApiParameter("start", OpenApiTypes.DATETIME), OpenApiParameter("end", OpenApiTypes.DATETIME)],
                   responses={200: UsagePageSerializer}, tags=["billing"])
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
            raise Problem(400, "validation_error", "Give start and end as RFC 3339 times, start before end.", errors=errors)
        tenant_id = request.user.tenant_id
        report = usage_by_sku(tenant_id=tenant_id, start=bounds["start"], end=bounds["end"])
        energy = allocation_energy(tenant_id=tenant_id, start=bounds["start"], end=bounds["end"])
        return Response({"results": UsageRowSerializer(report.rows, many=True).data,
                         "as_of": report.as_of.isoformat().replace("+00:00", "Z"), "next_page_token": None,
                         "energy": AllocationEnergySerializer(energy, many=True).data})


class InvoiceListView(APIView):
    permission_classes = [IsTenant]

    @extend_schema(operation_id="invoices_list", responses={200: InvoicePageSerializer}, tags=["billing"])
    def get(self, request):
        tenant_id = request.user.tenant_id
        page = paginate(invoices_for_tenant(tenant_id), request=request, scope=f"tenant:{tenant_id}")
        return Response({"results": InvoiceSerializer(page.results, many=True).data,
                         "next_page_token": page.next_page_token})


def _invoice(request, pk):
    invoice = invoice_for_tenant(tenant_id=request.user.tenant_id, invoice_id=uuid_or_404(pk))
    if invoice is None:
        raise Http404("no such invoice")
    return invoice


class InvoiceDetailView(APIView):
    permission_classes = [IsTenant]

    @extend_schema(operation_id="invoices_retrieve", parameters=[INVOICE_ID], responses={200: InvoiceSerializer},
                   tags=["billing"])
    def get(self, request, pk):
        return Response(InvoiceSerializer(_invoice(request, pk)).data)


CSV_HEADER = ("invoice", "status", "period", "line", "kind", "sku", "description", "usage_period", "start", "end",
              "gpu_seconds", "quantity", "unit", "unit_price", "price_version", "rate", "amount", "currency", "note",
              "reference")


def _when(moment) -> str:
    return "" if moment is None else moment.isoformat().replace("+00:00", "Z")


def invoice_csv(invoice) -> str:
    """The invoice as CSV: one row per line, then a total row. `amount` = ±round_half_even(
    gpu_seconds × unit_price × rate ÷ 3600) unless `note` says the line was capped."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(CSV_HEADER)
    label = invoice.number or f"draft-{invoice.pk}"
    for line in invoice.lines.all():
        writer.writerow(safe_row((label, invoice.status, format_period(invoice.period), line.position, line.kind,
                                  line.sku, line.description, format_period(line.usage_period), _when(line.start),
                                  _when(line.end), line.gpu_seconds, line.quantity, line.unit,
                                  "" if line.unit_price is None else line.unit_price, line.price_version or "",
                                  line.rate, line.amount, invoice.currency, line.note, line.reference)))
    total = dict.fromkeys(CSV_HEADER, "") | {"invoice": label, "status": invoice.status, "kind": "total",
                                             "period": format_period(invoice.period), "amount": invoice.total,
                                             "currency": invoice.currency}
    writer.writerow(safe_row(total.values()))
    return buffer.getvalue()


class InvoiceCsvView(APIView):
    permission_classes = [IsTenant]

    @extend_schema(parameters=[INVOICE_ID], responses={(200, "text/csv"): OpenApiTypes.STR}, tags=["billing"])
    def get(self, request, pk):
        invoice = _invoice(request, pk)
        response = HttpResponse(invoice_csv(invoice), content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="invoice-{invoice.number or invoice.pk}.csv"'
        return response


urlpatterns = [
    api_route("usage", UsageView.as_view(), "usage"),
    api_route("invoices", InvoiceListView.as_view(), "invoice-list"),
    api_route(r"invoices/(?P<pk>[^/]+)\.csv", InvoiceCsvView.as_view(), "invoice-csv"),
    api_route(r"invoices/(?P<pk>[^/.]+)", InvoiceDetailView.as_view(), "invoice-detail"),
]

ops_urlpatterns = [
    api_route("billing-runs", BillingRunsView.as_view(), "billing-runs"),
    api_route("billing-adjustments", AdjustmentsView.as_view(), "billing-adjustments"),
    api_route(r"invoices/(?P<pk>[^/]+)/reissue", InvoiceReissueView.as_view(), "invoice-reissue"),
    api_route(r"invoices/(?P<pk>[^/]+)/credit-notes", CreditNotesView.as_view(), "invoice-credit-notes"),
]

agent_urlpatterns = [api_route("meter-events", MeterEventsView.as_view(), "meter-events")]
