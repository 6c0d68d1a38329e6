"""Response shapes of the billing API (also what the OpenAPI schema shows)."""
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from billing.models import RejectionCode
from billing.periods import format_period


class MeterEventSerializer(serializers.Serializer):
    event_id = serializers.CharField(max_length=100)
    grant = serializers.CharField(max_length=1000, help_text="the metering grant from desired-state that covers "
                                  "this allocation and [start, end); without one the event is rejected "
                                  "(grant_missing)")
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


class UsagePageSerializer(serializers.Serializer):
    results = UsageRowSerializer(many=True)
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
