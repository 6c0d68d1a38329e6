"""Billing admin: price-book versions and SLA policies, the two kinds of billing terms an operator
edits. Both are append-only records (database triggers refuse UPDATE and DELETE), so the admin
only adds: a new version effective in the future, with the `price_book.add` / `sla_policy.add`
permission (core.services.permissions, the same check as everywhere), audited. A change to a
past price is a correction, not an edit: a new version plus a re-issue, each on the trail.

Adding a price shows first what it does to the open draft invoices of the months it touches
(each draft re-rated with the new row, total before → after); ticking "confirm" saves it.
"""

from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError
from django.db.models import Max
from django.utils import timezone

from billing.models import PriceBookEntry, SlaPolicy
from core.admin import AuditedModelAdmin
from core.services.permissions import has_permission

LEDGER = "ledger"


def draft_preview(entry: PriceBookEntry) -> list[tuple[str, str, str]]:
    """(month and tenant, total now, total with `entry`) for every open draft invoice of a month
    that ends after the entry takes effect, re-rated with its own run's scope."""
    from billing.models import BillingRun, Invoice, InvoiceStatus
    from billing.periods import format_period, period_end
    from billing.services.energy_lines import with_energy_lines
    from billing.services.rating import PriceBook, rate_period
    from billing.services.runs import cutoff_of

    book = PriceBook([*PriceBookEntry.objects.using(LEDGER).all(), entry])
    out = []
    drafts = Invoice.objects.using(LEDGER).filter(status=InvoiceStatus.DRAFT).order_by("period", "tenant_id")
    for draft in drafts[:200]:
        if period_end(draft.period) <= entry.effective_from:
            continue
        run = BillingRun.objects.using(LEDGER).filter(pk=draft.billing_run_id).first()
        if run is None:
            continue
        rated = with_energy_lines(
            rate_period(period=draft.period, cutoff=cutoff_of(run), book=book, tenant_ids=[draft.tenant_id]),
            period=draft.period,
            book=book,
            tenant_ids=[draft.tenant_id],
        ).get(draft.tenant_id, [])
        after = sum((line.amount for line in rated), draft.total * 0)
        out.append((f"{format_period(draft.period)} {draft.tenant_id}", str(draft.total), str(after)))
    return out


class PriceBookEntryForm(forms.ModelForm):
    confirm = forms.BooleanField(
        required=False, help_text="Tick after reading the preview of what this price does to open drafts."
    )

    class Meta:
        model = PriceBookEntry
        fields = ["version", "sku", "unit", "unit_price", "currency", "effective_from", "source"]

    def clean(self):
        data = super().clean()
        since, version = data.get("effective_from"), data.get("version")
        if since is None or version is None:
            return data
        if since <= timezone.now():
            raise ValidationError(
                {
                    "effective_from": "A new price takes effect in the future. A past price is a correction: add a "
                    "version and re-issue the invoices it affects, each with its reason on the audit trail."
                }
            )
        rows = PriceBookEntry.objects.using(LEDGER)
        highest = rows.aggregate(m=Max("version"))["m"] or 0
        same = rows.filter(version=version).values_list("effective_from", flat=True).first()
        if version < highest or (same is not None and same != since):
            raise ValidationError(
                {"version": f"Add version {highest + 1} (or more SKUs to v{highest} with its own effective_from)."}
            )
        if not data.get("confirm"):
            preview = draft_preview(PriceBookEntry(**{k: v for k, v in data.items() if k != "confirm"}))
            shown = "; ".join(f"{who}: {before} → {after}" for who, before, after in preview) or "no open draft changes"
            raise ValidationError(f"Preview of open drafts: {shown}. Tick confirm to add this price.")
        return data


@admin.register(PriceBookEntry)
class PriceBookEntryAdmin(AuditedModelAdmin):
    form = PriceBookEntryForm
    list_display = ("version", "sku", "unit_price", "currency", "unit", "effective_from", "created_at")
    list_filter = ("sku",)
    ordering = ("-version", "sku")

    def has_add_permission(self, request):
        return has_permission(request.user, "price_book.add")

    def has_change_permission(self, request, obj=None):
        return False  # append-only: a change is a new version

    def has_delete_permission(self, request, obj=None):
        return False


class SlaPolicyForm(forms.ModelForm):
    class Meta:
        model = SlaPolicy
        fields = [
            "key",
            "version",
            "tenant_id",
            "name",
            "attributions",
            "credit_rate",
            "cap_percent",
            "effective_from",
            "source",
        ]

    def clean(self):
        data = super().clean()
        if data.get("effective_from") and data["effective_from"] <= timezone.now():
            raise ValidationError({"effective_from": "A new SLA policy version takes effect in the future."})
        if data.get("key") and data.get("version") is not None:
            highest = SlaPolicy.objects.using(LEDGER).filter(key=data["key"]).aggregate(m=Max("version"))["m"] or 0
            if data["version"] != highest + 1:
                raise ValidationError({"version": f"The next version of {data['key']} is {highest + 1}."})
        rate, cap = data.get("credit_rate"), data.get("cap_percent")
        if rate is not None and not (0 <= rate <= 10):
            raise ValidationError({"credit_rate": "between 0 and 10 (10 × the list price at most)"})
        if cap is not None and not (0 <= cap <= 1000):
            raise ValidationError({"cap_percent": "between 0 and 1000 %"})
        return data


@admin.register(SlaPolicy)
class SlaPolicyAdmin(AuditedModelAdmin):
    form = SlaPolicyForm
    list_display = ("key", "version", "name", "tenant_id", "credit_rate", "cap_percent", "effective_from")
    ordering = ("key", "-version")

    def has_add_permission(self, request):
        return has_permission(request.user, "sla_policy.add")

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
