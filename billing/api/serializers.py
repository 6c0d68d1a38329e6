"""Response shapes of the billing API (also what the OpenAPI schema shows)."""

from decimal import Decimal

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from billing.models import RejectionCode
from billing.periods import format_period


class MeterEventSerializer(serializers.Serializer):
    event_id = serializers.CharField(max_length=100)
    grant = serializers.CharField(
        max_length=1000,
        help_text="the metering grant from desired-state that covers "
        "this allocation and [start, end); without one the event is rejected "
        "(grant_missing)",
    )
    allocation_id = serializers.UUIDField()
    tenant_id = serializers.UUIDField()
    sku = serializers.CharField(help_text="instance-type name, e.g. h100-sxm-8x")
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()
    quantity = serializers.CharField(help_text="decimal string: GPUs × seconds in [start, end)")
    unit = serializers.ChoiceField(choices=["gpu_second"])


class MeterBatchSerializer(serializers.Serializer):
    events = MeterEventSerializer(many=True, help_text="1 to 1000 events")


class MeterRejectionSerializer(serializers.Serializer):
    event_id = serializers.CharField()
    code = serializers.ChoiceField(choices=RejectionCode.choices)
    detail = serializers.CharField()


class MeterResultSerializer(serializers.Serializer):
    accepted = serializers.IntegerField()
    duplicates = serializers.IntegerField()
    rejected = MeterRejectionSerializer(many=True, help_text="events refused and never charged (kept for operators)")


@extend_schema_field({"type": "string", "pattern": r"^\d{4}-\d{2}$", "example": "2026-11"})
class PeriodField(serializers.Field):
    """A billing month, `YYYY-MM`."""

    def to_representation(self, value):
        return format_period(value)


class InvoiceLineSerializer(serializers.Serializer):
    position = serializers.IntegerField()
    kind = serializers.CharField()
    sku = serializers.CharField()
    description = serializers.CharField()
    usage_period = PeriodField()
    quantity = serializers.DecimalField(
        max_digits=20, decimal_places=6, help_text="GPU-hours, rounded for reading (facility kWh when unit is kwh)"
    )
    gpu_seconds = serializers.DecimalField(
        max_digits=24, decimal_places=6, help_text="the exact quantity the amount is computed from"
    )
    unit = serializers.CharField()
    unit_price = serializers.DecimalField(
        max_digits=12,
        decimal_places=6,
        allow_null=True,
        help_text="per GPU-hour (per kWh when unit is kwh), the price in force for this line",
    )
    rate = serializers.DecimalField(max_digits=9, decimal_places=6, help_text="share of the unit price charged")
    price_version = serializers.IntegerField(allow_null=True)
    start = serializers.DateTimeField(allow_null=True)
    end = serializers.DateTimeField(allow_null=True)
    amount = serializers.DecimalField(
        max_digits=18,
        decimal_places=2,
        help_text="± round_half_even(gpu_seconds × unit_price × rate ÷ 3600), unless `note` says it was capped",
    )
    note = serializers.CharField()
    reference = serializers.CharField()


class CreditNoteLineSerializer(serializers.Serializer):
    position = serializers.IntegerField()
    invoice_line = serializers.IntegerField(source="invoice_line.position", help_text="position on the invoice")
    description = serializers.CharField()
    amount = serializers.DecimalField(max_digits=18, decimal_places=2)


class CreditNoteSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    number = serializers.CharField()
    invoice = serializers.CharField(source="invoice.number")
    currency = serializers.CharField()
    total = serializers.DecimalField(max_digits=18, decimal_places=2, help_text="amount credited, before tax")
    tax = serializers.DecimalField(
        max_digits=18, decimal_places=2, allow_null=True, help_text="tax credited (the invoice's frozen rate)"
    )
    total_including_tax = serializers.DecimalField(
        max_digits=18, decimal_places=2, help_text="what the tenant gets back: total + tax"
    )
    reason = serializers.CharField()
    issued_at = serializers.DateTimeField()
    lines = CreditNoteLineSerializer(many=True, source="lines.all")


class PartySerializer(serializers.Serializer):
    name = serializers.CharField()
    address_lines = serializers.ListField(child=serializers.CharField())
    tax_id = serializers.CharField()


class InvoiceSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    number = serializers.CharField(allow_null=True)
    status = serializers.CharField(help_text="draft (upcoming), finalized or void")
    period = PeriodField()
    currency = serializers.CharField()
    total = serializers.DecimalField(
        max_digits=18, decimal_places=2, help_text="net of all lines (charges less credits), before tax"
    )
    tax_rate_percent = serializers.DecimalField(
        max_digits=5, decimal_places=2, allow_null=True, help_text="frozen at finalization; null on drafts"
    )
    due_on = serializers.DateField(allow_null=True, help_text="issue date + the tenant's payment terms")
    created_at = serializers.DateTimeField()
    finalized_at = serializers.DateTimeField(allow_null=True)
    replaces = serializers.CharField(
        source="replaces.number",
        allow_null=True,
        default=None,
        help_text="number of the void invoice this one re-issues",
    )
    void_reason = serializers.CharField()
    total_excluding_tax = serializers.DecimalField(
        max_digits=18, decimal_places=2, source="total", help_text="the same as total: the net before tax"
    )
    tax = serializers.SerializerMethodField(help_text="net × the tax rate (a draft: the tenant's current rate)")
    total_including_tax = serializers.SerializerMethodField(help_text="total_excluding_tax + tax: the PDF's total due")
    credited = serializers.SerializerMethodField(help_text="what its credit notes give back, tax included")
    balance_due = serializers.SerializerMethodField(help_text="total_including_tax − credited")
    seller = serializers.SerializerMethodField(help_text="who issues it (frozen at finalization)")
    bill_to = serializers.SerializerMethodField(help_text="who it is billed to (frozen at finalization)")
    parties_frozen = serializers.SerializerMethodField(
        help_text="true: seller and bill_to as recorded when it was finalized; false: as they are today "
        "(a draft, or an invoice finalized before they were recorded)",
    )
    lines = InvoiceLineSerializer(many=True, source="lines.all")
    credit_notes = CreditNoteSerializer(many=True, source="credit_notes.all")

    @extend_schema_field(serializers.BooleanField())
    def get_parties_frozen(self, invoice) -> bool:
        return invoice.seller_name is not None

    @extend_schema_field(PartySerializer)
    def get_seller(self, invoice) -> dict:
        party = self._statement(invoice).seller
        return {"name": party.name, "address_lines": list(party.address_lines), "tax_id": party.tax_id}

    @extend_schema_field(PartySerializer)
    def get_bill_to(self, invoice) -> dict:
        party = self._statement(invoice).bill_to
        return {"name": party.name, "address_lines": list(party.address_lines), "tax_id": party.tax_id}

    def _statement(self, invoice):
        from billing.statement import invoice_statement
        from tenants.models import Tenant

        # one statement per invoice, one tenant read per tenant (a page is one tenant's invoices)
        root = self.root if self.root is not None else self
        cache = root.context.setdefault("statements", {})
        tenants = root.context.setdefault("tenants", {})
        if invoice.pk not in cache:
            if invoice.tenant_id not in tenants:
                tenants[invoice.tenant_id] = Tenant.objects.filter(pk=invoice.tenant_id).first()
            cache[invoice.pk] = invoice_statement(invoice, tenants[invoice.tenant_id])
        return cache[invoice.pk]

    @extend_schema_field(serializers.DecimalField(max_digits=18, decimal_places=2))
    def get_tax(self, invoice) -> str:
        return str(self._statement(invoice).tax)

    @extend_schema_field(serializers.DecimalField(max_digits=18, decimal_places=2))
    def get_total_including_tax(self, invoice) -> str:
        return str(self._statement(invoice).total_due)

    @extend_schema_field(serializers.DecimalField(max_digits=18, decimal_places=2))
    def get_credited(self, invoice) -> str:
        return str(self._statement(invoice).credited)

    @extend_schema_field(serializers.DecimalField(max_digits=18, decimal_places=2))
    def get_balance_due(self, invoice) -> str:
        return str(self._statement(invoice).balance_due)


class InvoicePageSerializer(serializers.Serializer):
    results = InvoiceSerializer(many=True)
    next_page_token = serializers.CharField(allow_null=True)


class UsageRowSerializer(serializers.Serializer):
    sku = serializers.CharField()
    period = PeriodField()
    quantity = serializers.DecimalField(max_digits=20, decimal_places=6, help_text="GPU-hours")
    gpu_seconds = serializers.DecimalField(max_digits=24, decimal_places=6, help_text="exact quantity")
    unit = serializers.CharField()
    unit_price = serializers.DecimalField(max_digits=12, decimal_places=6, help_text="in force while it ran")
    price_version = serializers.IntegerField()
    start = serializers.DateTimeField(help_text="when this price was in force, within the period")
    end = serializers.DateTimeField()
    amount = serializers.DecimalField(max_digits=18, decimal_places=2)
    currency = serializers.CharField()


class AllocationEnergySerializer(serializers.Serializer):
    """One allocation's energy in one month (UTC), from the nodes' energy counters (docs/power.md)."""

    allocation_id = serializers.UUIDField()
    allocation_name = serializers.CharField()
    month = serializers.CharField(help_text="YYYY-MM (UTC)")
    it_kwh = serializers.DecimalField(max_digits=16, decimal_places=3, help_text="the nodes' wall (IT) energy")
    measured_kwh = serializers.DecimalField(
        max_digits=16, decimal_places=3, help_text="of it_kwh, from meter counters (BMC or PDU)"
    )
    estimated_kwh = serializers.DecimalField(
        max_digits=16, decimal_places=3, help_text="of it_kwh, estimated from GPU counters + the host share"
    )
    facility_kwh = serializers.DecimalField(max_digits=16, decimal_places=3, help_text="it_kwh × the site's PUE")
    kg_co2e = serializers.DecimalField(
        max_digits=16,
        decimal_places=3,
        help_text="facility_kwh × the site's grid carbon intensity: the hour's where the site's uploaded "
        "hourly profile covers it, the site's constant elsewhere (see carbon_source)",
    )
    carbon_source = serializers.CharField(help_text="profile, constant, mixed or none: which intensity kg_co2e is at")
    carbon_profile_pct = serializers.DecimalField(
        max_digits=4,
        decimal_places=1,
        allow_null=True,
        help_text="share of facility_kwh at a profiled hour's intensity",
    )
    energy_cost = serializers.DecimalField(
        max_digits=16,
        decimal_places=2,
        help_text="facility_kwh × the site's electricity price; informational (the invoice's energy line, "
        "when the price book prices energy, is at the price book's price)",
    )
    currency = serializers.CharField()
    gpu_hours = serializers.DecimalField(max_digits=16, decimal_places=3)
    avg_kw_per_gpu = serializers.DecimalField(max_digits=10, decimal_places=3, allow_null=True)
    coverage_pct = serializers.DecimalField(
        max_digits=5,
        decimal_places=1,
        allow_null=True,
        help_text="share of the allocation's node time the counters cover",
    )
    source = serializers.CharField(help_text="measured, estimate, mixed or none")


class UsagePageSerializer(serializers.Serializer):
    results = UsageRowSerializer(many=True)
    as_of = serializers.DateTimeField(help_text="priced as the draft invoice would price it at this moment")
    energy = AllocationEnergySerializer(
        many=True, help_text="energy per allocation and month in the window (additive to the usage rows; informational)"
    )
    archived_months = serializers.ListField(
        child=serializers.CharField(),
        help_text="months (YYYY-MM) in the window whose usage rows were archived out of the ledger: "
        "`results` leaves them out (energy is not in the ledger and stays); their finalized invoices "
        "hold the frozen lines",
    )
    next_page_token = serializers.CharField(allow_null=True, help_text="always null")


class CreditNoteLineRequestSerializer(serializers.Serializer):
    position = serializers.IntegerField(min_value=1, max_value=100000)
    amount = serializers.DecimalField(
        max_digits=14, decimal_places=2, min_value=Decimal("0.01"), max_value=Decimal("1000000000.00")
    )


class CreditNoteRequestSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=2000)
    lines = CreditNoteLineRequestSerializer(many=True, min_length=1, max_length=500)


class ReissueRequestSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=2000)


class AdjustmentRequestSerializer(serializers.Serializer):
    tenant_id = serializers.UUIDField()
    period = serializers.RegexField(
        r"^\d{4}-(0[1-9]|1[0-2])$",
        help_text="YYYY-MM",
        error_messages={"invalid": "Write the period as YYYY-MM, e.g. 2026-11."},
    )
    amount = serializers.DecimalField(
        max_digits=10,
        decimal_places=2,
        min_value=Decimal("-1000000.00"),
        max_value=Decimal("1000000.00"),
        help_text="+ charge, − credit",
    )
    reason = serializers.CharField(max_length=2000)
    reference = serializers.CharField(max_length=200, required=False, default="")


class AdjustmentSerializer(serializers.Serializer):
    id = serializers.UUIDField(source="public_id")
    kind = serializers.CharField()
    tenant_id = serializers.UUIDField()
    period = PeriodField()
    amount = serializers.DecimalField(max_digits=18, decimal_places=6)
    reason = serializers.CharField()
    reference = serializers.CharField()
    actor = serializers.CharField()
    created_at = serializers.DateTimeField()


class BillingRunRequestSerializer(serializers.Serializer):
    period = serializers.RegexField(
        r"^\d{4}-(0[1-9]|1[0-2])$",
        help_text="YYYY-MM",
        error_messages={"invalid": "Write the period as YYYY-MM, e.g. 2026-11."},
    )
    finalize = serializers.BooleanField(default=False)


class BillingRunSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    period = PeriodField()
    finalize = serializers.BooleanField()
    price_book_version = serializers.IntegerField()
    watermark = serializers.IntegerField()
    adjustment_watermark = serializers.IntegerField()
    invoices = serializers.IntegerField()
    output_hash = serializers.CharField()
    actor = serializers.CharField()
    started_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField()
