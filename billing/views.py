"""Billing console page (operators) and tenant portal pages (members of a tenant)."""

from datetime import UTC, datetime, time, timedelta

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.utils import timezone
from django.views.decorators.http import require_http_methods

from billing.charts import daily_gpu_hours_figure
from billing.exports import invoice_csv
from billing.models import DisputeStatus, LineKind
from billing.periods import next_period, period_end
from billing.selectors import (
    archived_periods_between,
    daily_gpu_hours,
    default_usage_window,
    dispute_by_public_id,
    dispute_counts,
    invoice_for_tenant,
    invoice_totals_by_tenant,
    invoices_for_tenant,
    open_disputes,
    policy_in_force,
    recent_rejections,
    recent_runs,
    rejection_tallies,
    resolved_disputes,
    usage_by_sku,
)
from billing.services.disputes import RESOLVE_PERMISSION, DisputeError, transition
from billing.statement import invoice_statement
from core.api.lookups import parse_uuid
from core.decorators import console_action, operator_required
from core.services.audit import actor_label
from fleet.pdf import pdf_response
from tenants.energy import allocation_energy, energy_totals
from tenants.models import Membership, Tenant

PORTAL_USAGE_DAYS = 30
PORTAL_INVOICES = 100


@operator_required
def billing_overview(request):

    totals = invoice_totals_by_tenant()
    slugs = dict(Tenant.objects.filter(pk__in={row["tenant_id"] for row in totals}).values_list("pk", "slug"))
    for row in totals:
        row["tenant"] = slugs.get(row["tenant_id"], str(row["tenant_id"]))
    return render(
        request,
        "billing/overview.html",
        {"nav": "billing", "runs": recent_runs(), "totals": totals, "dispute_counts": dispute_counts()},
    )


def _tenant_slugs(tenant_ids) -> dict:
    return dict(Tenant.objects.filter(pk__in=set(tenant_ids)).values_list("pk", "slug"))


@operator_required
def verification(request):
    """The independent verifier's last pass (billing.verifier): when, how many invoices, and
    every difference it found with the rows behind it. `manage.py verify_billing` and the
    nightly task record it."""
    from billing.verification import last_verification

    return render(request, "billing/verification.html", {"nav": "billing", "last": last_verification()})


@operator_required
def disputes(request):
    """Usage held out of billing (open disputes), recent resolutions, and refused meter events."""
    held, resolved, refused = open_disputes(), resolved_disputes(), recent_rejections()
    tallies = rejection_tallies()
    slugs = _tenant_slugs([d.tenant_id for d in held + resolved] + [r.tenant_id for r in refused])
    for item in (*held, *resolved, *refused):
        item.tenant_label = slugs.get(item.tenant_id, f"unknown tenant {item.tenant_id}")
    return render(
        request,
        "billing/disputes.html",
        {
            "nav": "billing",
            "held": held,
            "resolved": resolved,
            "refused": refused,
            "tallies": tallies,
            "can_resolve": request.user.has_perm(RESOLVE_PERMISSION),
        },
    )


@operator_required
@require_http_methods(["GET", "POST"])
@console_action("dispute.resolve")
def dispute_detail(request, pk):
    """Shows what accepting or rejecting touches, then (POST) does it."""
    public_id = parse_uuid(pk)
    dispute = dispute_by_public_id(public_id) if public_id else None
    if dispute is None:
        raise Http404("No such disputed usage.")
    if request.method == "POST":
        decision = {"accept": DisputeStatus.ACCEPTED, "reject": DisputeStatus.REJECTED}.get(
            request.POST.get("decision")
        )
        if decision is None:
            messages.error(request, "Choose accept or reject.")
        else:
            try:
                transition(
                    dispute_id=dispute.public_id,
                    to_status=decision,
                    user=request.user,
                    actor=actor_label(request.user),
                    note=request.POST.get("note", ""),
                )
            except DisputeError as exc:
                if exc.status == 403:
                    raise PermissionDenied(exc.detail) from None
                messages.error(request, exc.detail)
            else:
                messages.success(request, f"Disputed usage {decision}.")
                return redirect("billing:disputes")
        return redirect("billing:dispute", pk=pk)
    return render(
        request,
        "billing/dispute.html",
        {
            "nav": "billing",
            "dispute": dispute,
            "row": dispute.usage_event,
            "tenant": _tenant_slugs([dispute.tenant_id]).get(dispute.tenant_id, str(dispute.tenant_id)),
            "can_resolve": request.user.has_perm(RESOLVE_PERMISSION),
            "permission": RESOLVE_PERMISSION,
        },
    )


def _portal_tenant(request):
    """The tenant the logged-in user is a member of (first by slug)."""

    membership = Membership.objects.select_related("tenant").filter(user=request.user).order_by("tenant__slug").first()
    if membership is None:
        raise PermissionDenied(
            "The portal shows one tenant's allocations, usage and invoices, and this account is not a "
            "member of any tenant. Ask a tenant admin to add you."
        )
    return membership.tenant


@login_required
def portal_usage(request):
    tenant = _portal_tenant(request)
    now = timezone.now()
    today = now.date()
    start_day = today - timedelta(days=PORTAL_USAGE_DAYS - 1)
    window_start = now.replace(
        year=start_day.year, month=start_day.month, day=start_day.day, hour=0, minute=0, second=0, microsecond=0
    )
    daily = daily_gpu_hours(tenant_id=tenant.pk, start=window_start, end=now + timedelta(seconds=1))
    figure = daily_gpu_hours_figure(daily, start=start_day, end=today + timedelta(days=1))
    # A month archived out of the ledger draws as zero days; say so rather than show a dip.
    chart_archived = archived_periods_between(window_start, now)
    month_start, month_end = default_usage_window(now)
    energy = allocation_energy(tenant_id=tenant.pk, start=month_start, end=month_end)
    report = usage_by_sku(tenant_id=tenant.pk, start=month_start, end=month_end, as_of=now)
    return render(
        request,
        "billing/portal_usage.html",
        {
            "energy_rows": energy,
            "energy_totals": energy_totals(energy).get(f"{month_start:%Y-%m}"),
            "nav": "portal",
            "portal_nav": "usage",
            "tenant": tenant,
            "figure_json": figure.to_json(),
            "days": PORTAL_USAGE_DAYS,
            "chart_archived": chart_archived,
            "month_rows": report.rows,
            "as_of": report.as_of,
            "month_start": month_start,
            "sla_policy": policy_in_force(tenant.pk, now),
        },
    )


@login_required
def portal_invoices(request):
    tenant = _portal_tenant(request)
    invoices = list(invoices_for_tenant(tenant.pk).order_by("-period", "-created_at")[:PORTAL_INVOICES])
    return render(
        request,
        "billing/portal_invoices.html",
        {"nav": "portal", "portal_nav": "invoices", "tenant": tenant, "invoices": invoices},
    )


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
    # Energy of the invoice's month, informational (not an invoice line until the price book prices energy).
    start = datetime(invoice.period.year, invoice.period.month, 1, tzinfo=UTC)
    end = datetime.combine(next_period(invoice.period), time.min, tzinfo=UTC)
    energy = allocation_energy(tenant_id=tenant.pk, start=start, end=end)
    return render(
        request,
        "billing/portal_invoice.html",
        {
            "nav": "portal",
            "portal_nav": "invoices",
            "tenant": tenant,
            "invoice": invoice,
            "statement": invoice_statement(invoice, tenant),
            "period_end": period_end(invoice.period) - timedelta(days=1),
            "energy_rows": energy,
            "energy_totals": energy_totals(energy).get(f"{invoice.period:%Y-%m}"),
            # the lines are prefetched with the invoice: no query
            "energy_line": next((line for line in invoice.lines.all() if line.kind == LineKind.ENERGY), None),
        },
    )


@login_required
def portal_invoice_pdf(request, pk):
    """The invoice document alone, as a PDF (WeasyPrint, like the certificates)."""
    tenant, invoice = _tenant_invoice(request, pk)
    context = {
        "invoice": invoice,
        "statement": invoice_statement(invoice, tenant),
        "period_end": period_end(invoice.period) - timedelta(days=1),
    }
    html = render_to_string("billing/invoice_pdf.html", context, request=request)
    return pdf_response(html, f"invoice-{invoice.number or invoice.pk}.pdf")


@login_required
def portal_credit_note_pdf(request, pk):
    """A credit note as its own numbered document (PDF): the invoice it credits, its lines, the
    tax it gives back and the invoice's balance after it. Another tenant's note is a 404."""
    from billing.models import CreditNote

    tenant = _portal_tenant(request)
    note_id = parse_uuid(pk)
    note = (
        CreditNote.objects.select_related("invoice")
        .prefetch_related("lines")
        .filter(pk=note_id, tenant_id=tenant.pk)
        .first()
        if note_id
        else None
    )
    if note is None:
        raise Http404("No such credit note.")
    statement = invoice_statement(note.invoice, tenant)
    html = render_to_string(
        "billing/credit_note_pdf.html", {"note": note, "statement": statement, "tenant": tenant}, request=request
    )
    return pdf_response(html, f"credit-note-{note.number}.pdf")


@login_required
def portal_invoice_csv(request, pk):
    _, invoice = _tenant_invoice(request, pk)
    response = HttpResponse(invoice_csv(invoice), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="invoice-{invoice.number or invoice.pk}.csv"'
    return response
