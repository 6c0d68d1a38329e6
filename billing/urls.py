"""Console pages of the billing app: operators' /billing/, tenants' portal usage and invoices."""

from django.urls import path

from billing import views

app_name = "billing"
urlpatterns = [
    path("billing/", views.billing_overview, name="overview"),
    path("billing/verification/", views.verification, name="verification"),
    path("billing/disputes/", views.disputes, name="disputes"),
    path("billing/disputes/<str:pk>/", views.dispute_detail, name="dispute"),
    path("portal/usage/", views.portal_usage, name="portal-usage"),
    path("portal/invoices/", views.portal_invoices, name="portal-invoices"),
    path("portal/invoices/<str:pk>.pdf", views.portal_invoice_pdf, name="portal-invoice-pdf"),
    path("portal/credit-notes/<str:pk>.pdf", views.portal_credit_note_pdf, name="portal-credit-note-pdf"),
    path("portal/invoices/<str:pk>.csv", views.portal_invoice_csv, name="portal-invoice-csv"),
    path("portal/invoices/<str:pk>/", views.portal_invoice_detail, name="portal-invoice"),
]
