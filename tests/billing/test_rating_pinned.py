"""A month with every kind of line, rated and pinned: the figures and the run's output hash
below were computed by the rating before it moved to one scan per run (per-tenant Python,
json.dumps hash), so any change to a bill, a rounding, a line's text or order fails here.

September 2026, H100 2.35 (v1) until a v2 at 3.00 from 15 September 00:00, A100 1.50 (v1 both
halves):
- tenant 1: 10 GPU-h of H100 on 10 September, 10 on 20 September, one 2-hour interval of 8 GPUs
  across the price change (8 GPU-h each side), 4 GPU-h of A100; August finalized with 8 GPU-h,
  then 2 GPU-h of August arrive late;
- tenant 2: 8 GPU-h of H100 and an SLA credit for a 10-hour window (188.00 uncapped, capped at
  the allocation's charge);
- tenant 3: no usage, a manual charge of 12.34 and a credit of -0.01;
- tenant 4: usage on an allocation nobody recorded (held as disputed), then accepted: rated;
- tenant 5: usage on an allocation nobody recorded, held and never accepted: no invoice.
"""

import hashlib
import json
import uuid
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
from django.db import connections

from billing.models import Adjustment, AdjustmentKind, BillingRun, Invoice, InvoiceLine, PriceBookEntry, UsageDispute
from billing.services.credits import record_sla_credit
from billing.services.rating import LINE_FIELDS, RatedLine, output_hash
from billing.services.runs import run_billing

from .conftest import LEDGER_DBS, make_event

pytestmark = pytest.mark.django_db(databases=LEDGER_DBS)
AUG, SEP = date(2026, 8, 1), date(2026, 9, 1)
NOW = datetime(2026, 12, 1, tzinfo=UTC)
T1, T2, T3, T4, T5 = (uuid.UUID(int=(i << 96) + 0xB111) for i in range(1, 6))  # distinct slug prefixes
A2 = uuid.UUID(int=(0xA110 << 64) + 2)
NODE = uuid.UUID(int=0xD0DE)


def at(day: int, hour: int = 0, month: int = 9) -> datetime:
    return datetime(2026, month, day, hour, tzinfo=UTC)


def hours(tenant, start, gpu_hours, *, sku="h100-sxm-8x", allocation=None, name=None):
    return make_event(
        tenant_id=tenant,
        allocation_id=allocation,
        start=start,
        seconds=int(gpu_hours * 3600 / 8),
        gpus=8,
        sku=sku,
        event_id=name or f"{tenant}-{start.isoformat()}-{sku}",
    )


def _month(ingest):
    PriceBookEntry.objects.using("ledger").create(
        version=2, sku="h100-sxm-8x", unit_price=Decimal("3.00"), effective_from=at(15), source="test: price change"
    )
    ingest([hours(T1, at(3, month=8), 8)])
    run_billing(period=AUG, finalize=True, actor="test", now=NOW)
    ingest(
        [
            hours(T1, at(10), 10),
            hours(T1, at(20), 10),
            make_event(tenant_id=T1, start=at(14, 23), seconds=7200, gpus=8, event_id="t1-straddle"),
            hours(T1, at(11), 4, sku="a100-sxm-8x"),
            hours(T1, at(20, month=8), 2, name="t1-late-august"),
            hours(T2, at(2), 8, allocation=A2),
        ]
    )
    ingest([hours(T4, at(5), 3), hours(T5, at(6), 5)], history=False)
    record_sla_credit(
        tenant_id=T2,
        allocation_id=A2,
        node_id=NODE,
        start=at(10),
        end=at(10, 10),
        gpus=8,
        reason="node pulled: XID 79",
        incident_id="inc-pinned",
    )
    for amount, key in ((Decimal("12.340000"), "charge"), (Decimal("-0.010000"), "credit")):
        Adjustment.objects.using("ledger").create(
            kind=AdjustmentKind.MANUAL,
            tenant_id=T3,
            period=SEP,
            amount=amount,
            reason=f"ticket 99: {key} — “quoted”",
            reference=f"ticket 99 {key}",
            actor="ops@example.com",
            dedupe_key=f"manual:{T3}:{key}",
        )


def _lines():
    return [
        (str(line.invoice.tenant_id)[7], line.position, line.kind, line.sku, str(line.quantity), str(line.unit_price))
        + (str(line.amount), line.price_version, str(line.start), str(line.end))
        for line in InvoiceLine.objects.using("ledger")
        .filter(invoice__period=SEP)
        .select_related("invoice")
        .order_by("invoice__tenant_id", "position")
    ]


# Per vendor: the seeded v1 prices read back as 2.350000 from PostgreSQL's NUMERIC and as 2.35
# from SQLite's text, and the hash covers str(unit_price) (the lines store 2.350000 on both).
PINNED_HASH = {
    "postgresql": "dfef67e2f68e25149afd52de71505e71fcf45be5fb9d3cd1abbdb02744c6ca68",
    "sqlite": "8698641aaf1f44682f1ead55712a16d3a87391e5dfab1ea8605152ade62b44df",
}
SEPT_1, SEPT_15, OCT_1 = "2026-09-01 00:00:00+00:00", "2026-09-15 00:00:00+00:00", "2026-10-01 00:00:00+00:00"
# (tenant, position, kind, sku, GPU-hours, unit price, amount, price version, start, end)
PINNED_LINES = [
    ("1", 1, "late_usage", "h100-sxm-8x", "2.000000", "2.350000", "4.70", 1, "2026-08-01 00:00:00+00:00", SEPT_1),
    ("1", 2, "usage", "a100-sxm-8x", "4.000000", "1.500000", "6.00", 1, SEPT_1, OCT_1),
    ("1", 3, "usage", "h100-sxm-8x", "18.000000", "2.350000", "42.30", 1, SEPT_1, SEPT_15),
    ("1", 4, "usage", "h100-sxm-8x", "18.000000", "3.000000", "54.00", 2, SEPT_15, OCT_1),
    ("2", 1, "usage", "h100-sxm-8x", "8.000000", "2.350000", "18.80", 1, SEPT_1, SEPT_15),
    (
        "2",
        2,
        "sla_credit",
        "h100-sxm-8x",
        "80.000000",
        "2.350000",
        "-18.80",
        1,
        SEPT_1[:8] + "10 00:00:00+00:00",
        "2026-09-10 10:00:00+00:00",
    ),
    ("3", 1, "manual", "", "0.000000", "None", "12.34", None, "None", "None"),
    ("3", 2, "manual", "", "0.000000", "None", "-0.01", None, "None", "None"),
    ("4", 1, "usage", "h100-sxm-8x", "3.000000", "2.350000", "7.05", 1, SEPT_1, SEPT_15),
]


def test_a_month_of_every_kind_of_line_rates_as_it_always_did(ingest):
    _month(ingest)
    first = run_billing(period=SEP, finalize=False, actor="test", now=NOW).run
    assert UsageDispute.objects.using("ledger").filter(tenant_id__in=[T4, T5]).count() == 2
    assert not Invoice.objects.using("ledger").filter(tenant_id__in=[T4, T5]).exists()
    UsageDispute.objects.using("ledger").filter(tenant_id=T4).update(status="accepted")
    draft = run_billing(period=SEP, finalize=False, actor="test", now=NOW).run
    assert draft.output_hash != first.output_hash  # tenant 4's accepted usage is now on it
    again = run_billing(period=SEP, finalize=False, actor="test", now=NOW).run
    final = run_billing(period=SEP, finalize=True, actor="test", now=NOW).run
    assert draft.output_hash == again.output_hash == final.output_hash == PINNED_HASH[connections["ledger"].vendor]
    assert _lines() == PINNED_LINES
    assert BillingRun.objects.using("ledger").filter(period=SEP).count() == 4


def _reference_hash(*, period, price_book_version, rated) -> str:
    # The canonical form as it was first written: json.dumps of the whole result.
    canonical = {
        "period": f"{period:%Y-%m}",
        "price_book_version": price_book_version,
        "invoices": {
            str(tenant): [{name: str(getattr(line, name)) for name in LINE_FIELDS} for line in rated[tenant]]
            for tenant in sorted(rated, key=str)
        },
    }
    return hashlib.sha256(json.dumps(canonical, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def test_the_output_hash_is_json_dumps_of_the_canonical_form_byte_for_byte():
    shared_start = datetime(2026, 9, 1, tzinfo=UTC)
    line = RatedLine(
        kind="usage",
        sku="h100-sxm-8x",
        description='GPU-hours "quoted" — at 2.35 \\ per\nhour ü, 100% %s %%',
        usage_period=SEP,
        quantity=Decimal("1.000000"),
        unit="gpu_hour",
        unit_price=Decimal("2.350000"),
        amount=Decimal("2.35"),
        quantity_micro=3_600_000_000,
        price_version=1,
        start=shared_start,
        end=shared_start + timedelta(days=30),
    )
    rated = {
        T2: [line, line._replace(amount=Decimal("-0.00"), unit_price=None, note="capped at 10% of %(x)s", start=None)],
        T1: [line._replace(rate=Decimal("0.500000"), amount=Decimal("1.2"), quantity=Decimal("1.0"))],
        T3: [],
        # equal prices written differently: the hash tells them apart, as str() does
        T4: [line._replace(unit_price=Decimal("2.35")), line._replace(unit_price=Decimal("2.350000"))],
    }
    for candidate in (rated, {}, {T1: rated[T1]}):
        assert output_hash(period=SEP, price_book_version=2, rated=candidate) == _reference_hash(
            period=SEP, price_book_version=2, rated=candidate
        )
