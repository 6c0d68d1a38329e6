"""Billing API routes: usage and invoices for tenants, billing runs and corrections for
operators, meter events from node agents."""

from core.api.routes import api_route

from .agent_views import MeterEventsView
from .views import (
    AdjustmentsView,
    BillingRunsView,
    CreditNotesView,
    InvoiceCsvView,
    InvoiceDetailView,
    InvoiceListView,
    InvoiceReissueView,
    UsageView,
)

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
