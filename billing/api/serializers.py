"""Response shapes of the billing API (also what the OpenAPI schema shows)."""
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from billing.periods import format_period


class MeterEventSerializer(serializers.Serializer):
    event_id = serializers.CharField(max_length=100)
    allocation_id = serializers.UUIDField()
    tenant_id = serializers.UUIDField()
    sku = serializers.CharField(help_text="instance-type name, e.g. h100-sxm-8x")
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()
    quantity = serializers.CharField(help_text="decimal string: GPUs × seconds in [start, end)")
    unit = serializers.ChoiceField(choices=["gpu_second"])


class MeterBatchSerializer(serializers.Serializer):
    events = MeterEventSerializer(many=True, help_text="1 to 1000 events")


class MeterResultSerializer(serializers.Serializer):
    accepted = serializers.IntegerField()
    duplicates = serializers.IntegerField()


@extend_schema_field({"type": "string", "pattern": r"^\d{4}-\d{2}$", "example": "2026-11"})
class PeriodField(serializers.Field):
    """A billing month, `YYYY-MM`."""

    def to_representation(self, value):
        return format_period(value)


class InvoiceLineSerializer(serializers.Serializer):
    kind = serializers.CharField()
    sku = serializers.CharField()
    description = serializers.CharField()
    usage_period = PeriodField()
    quantity = serializers.DecimalField(max_digits=20, decimal_places=6)
    unit = serializers.CharField()
    unit_price = serializers.DecimalField(max_digits=12, decimal_places=6, allow_null=True)
    amount = serializers.DecimalField(max_digits=18, decimal_places=2)
    reference = serializers.CharField()


class InvoiceSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    number = serializers.CharField(allow_null=True)
    status = serializers.CharField(help_text="draft (upcoming), finalized or void")
    period = PeriodField()
    currency = serializers.CharField()
    total = serializers.DecimalField(max_digits=18, decimal_places=2)
    created_at = serializers.DateTimeField()
    finalized_at = serializers.DateTimeField(allow_null=True)
    lines = InvoiceLineSerializer(many=True, source="lines.all")


class InvoicePageSerializer(serializers.Serializer):
    results = InvoiceSerializer(many=True)
    next_page_token = serializers.CharField(allow_null=True)


class UsageRowSerializer(serializers.Serializer):
    sku = serializers.CharField()
    quantity = serializers.DecimalField(max_digits=20, decimal_places=6, help_text="GPU-hours")
    unit = serializers.CharField()
    amount = serializers.DecimalField(max_digits=18, decimal_places=2)
    currency = serializers.CharField()


class AllocationEnergySerializer(serializers.Serializer):
    """One allocation's energy in one month (UTC), from the nodes' energy counters (docs/power.md)."""

    allocation_id = serializers.UUIDField()
    allocation_name = serializers.CharField()
    month = serializers.CharField(help_text="YYYY-MM (UTC)")
    it_kwh = serializers.DecimalField(max_digits=16, decimal_places=3, help_text="the nodes' wall (IT) energy")
    measured_kwh = serializers.DecimalField(max_digits=16, decimal_places=3,
                                            help_text="of it_kwh, from meter counters (BMC or PDU)")
    estimated_kwh = serializers.DecimalField(max_digits=16, decimal_places=3,
                                             help_text="of it_kwh, estimated from GPU counters + the host share")
    facility_kwh = serializers.DecimalField(max_digits=16, decimal_places=3, help_text="it_kwh × the hall's PUE")
    kg_co2e = serializers.DecimalField(max_digits=16, decimal_places=3,
                                       help_text="facility_kwh × the site's grid carbon intensity")
    energy_cost = serializers.DecimalField(max_digits=16, decimal_places=2,
                                           help_text="facility_kwh × the site's electricity price; informational, "
                                                     "not charged unless the price book prices energy")
    currency = serializers.CharField()
    gpu_hours = serializers.DecimalField(max_digits=16, decimal_places=3)
    avg_kw_per_gpu = serializers.DecimalField(max_digits=10, decimal_places=3, allow_null=True)
    coverage_pct = serializers.DecimalField(max_digits=5, decimal_places=1, allow_null=True,
                                            help_text="share of the allocation's node time the counters cover")
    source = serializers.CharField(help_text="measured, estimate, mixed or none")


class UsagePageSerializer(serializers.Serializer):
    results = UsageRowSerializer(many=True)
    energy = AllocationEnergySerializer(many=True, help_text="energy per allocation and month in the window "
                                                             "(additive to the usage rows; informational)")
    next_page_token = serializers.CharField(allow_null=True, help_text="always null")


class BillingRunRequestSerializer(serializers.Serializer):
    period = serializers.RegexField(r"^\d{4}-(0[1-9]|1[0-2])$", help_text="YYYY-MM",
                                    error_messages={"invalid": "Write the period as YYYY-MM, e.g. 2026-11."})
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
