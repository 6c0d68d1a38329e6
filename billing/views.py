"""Billing console page (operators) and tenant portal pages (members of a tenant)."""
from datetime import timedelta

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from billing.api.urls import invoice_csv
from billing.charts import daily_gpu_hours_figure
from billing.selectors import (
    daily_gpu_hours,
    default_usage_window,
    invoice_for_tenant,
    invoice_totals_by_tenant,
    invoices_for_tenant,
    policy_in_force,
    recent_runs,
    usage_by_sku,
)
from core.api.lookups import parse_uuid
from core.decorators import operator_required
from tenants.models import Membership, Tenant

PORTAL_USAGE_DAYS = 30
PORTAL_INVOICES = 100


@operator_required
def billing_overview(request):

    totals = invoice_totals_by_tenant()
    slugs = dict(Tenant.objects.filter(pk__in={row["tenant_id"] for row in totals}).values_list("pk", "slug"))
    for row in totals:
        row["tenant"] = slugs.get(row["tenant_id"], str(row["tenant_id"]))
    return render(request, "billing/overview.html", {"nav": "billing", "runs": recent_runs(), "totals": totals})


def _portal_tenant(request):
    """The tenant the logged-in user is a member of (first by slug)."""

    membership = Membership.objects.select_related("tenant").filter(user=request.user).order_by("tenant__slug").first()
    if membership is None:
        raise PermissionDenied("This account is not a member of any tenant; ask a tenant admin to invite you.")
    return membership.tenant


@login_required
def portal_usage(request):
    tenant = _portal_tenant(request)
    now = timezone.now()
    today = now.date()
    start_day = today - timedelta(days=PORTAL_USAGE_DAYS - 1)
    window_start = now.replace(year=start_day.year, month=start_day.month, day=start_day.day, hour=0, minute=0,
                               second=0, microsecond=0)
    daily = daily_gpu_hours(tenant_id=tenant.pk, start=window_start, end=now + timedelta(seconds=1))
    figure = daily_gpu_hours_figure(daily, start=start_day, end=today + timedelta(days=1))
    month_start, month_end = default_usage_window(now)
    report = usage_by_sku(tenant_id=tenant.pk, start=month_start, end=month_end, as_of=now)
    return render(request, "billing/portal_usage.html", {
        "nav": "portal", "tenant": tenant, "figure_json": figure.to_json(), "days": PORTAL_USAGE_DAYS,
        "month_rows": report.rows, "as_of": report.as_of, "month_start": month_start,
        "sla_policy": policy_in_force(tenant.pk, now),
    })


@login_required
def portal_invoices(request):
    tenant = _portal_tenant(request)
    invoices = list(invoices_for_tenant(tenant.pk).order_by("-period", "-created_at")[:PORTAL_INVOICES])
    return render(request, "billing/portal_invoices.html", {"nav": "portal", "tenant": tenant, "invoices": invoices})


def _tenant_invoice(request, pk):
    tenant = _portal_tenant(request)
    invoice_id = parse_uuid(pk)
    invoice = invoice_for_tenant(tenant_id=tenant.pk, invoice_id=invoice_id) if invoice_id else None
    if invoice is None:
        raise Http404("No such invoice.")
    return tenant, invoice


@login_required
def portal_invoice_detail(request, pk):
    tenant, invoice = _tenant_invoice(request, pk)
    return render(request, "billing/portal_invoice.html", {"nav": "portal", "tenant": tenant, "invoice": invoice})


@login_required
def portal_invoice_csv(request, pk):
    _, invoice = _tenant_invoice(request, pk)
    response = HttpResponse(invoice_csv(invoice), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="invoice-{invoice.number or invoice.pk}.csv"'
    return response
