"""The usage spans the database keeps (billing.models.UsageSpan, migration 0010): one per month,
allocation, node and tenant, covering every usage row however it was inserted, and what a
billing run's reconciliation reads instead of grouping the month by allocation and node."""

import uuid
from datetime import UTC, date, datetime, timedelta

import pytest
from django.db import connections, transaction
from django.db.models import Max, Min

from billing.models import UsageDispute, UsageEvent, UsageSpan
from billing.services.ledger_partitions import ensure_partitions_for
from billing.services.runs import run_billing

from .conftest import LEDGER_DBS, make_event

pytestmark = pytest.mark.django_db(databases=LEDGER_DBS)
SEP, OCT = date(2026, 9, 1), date(2026, 10, 1)
START = datetime(2026, 10, 10, tzinfo=UTC)
KEY = ("period", "allocation_id", "node_id", "tenant_id")
COLUMNS = (
    'event_id, part, tenant_id, allocation_id, node_id, sku, start, "end", period, quantity_micro, unit, '
    "payload_hash, received_at"
)


def _spans() -> dict:
    return {
        tuple(row[:4]): row[4:]
        for row in UsageSpan.objects.using("ledger").values_list(*KEY, "first_start", "last_end", "last_id")
    }


def _from_rows() -> dict:
    """The spans as the usage rows themselves give them."""
    return {
        tuple(row[:4]): row[4:]
        for row in UsageEvent.objects.using("ledger")
        .values_list(*KEY)
        .annotate(first=Min("start"), last=Max("end"), top=Max("id"))
        .order_by()
    }


def _row(tenant, allocation, node, start: datetime, minutes: int = 1, **fields) -> UsageEvent:
    return UsageEvent(
        event_id=str(uuid.uuid4()),
        tenant_id=tenant,
        allocation_id=allocation,
        node_id=node,
        sku="h100-sxm-8x",
        start=start,
        end=start + timedelta(minutes=minutes),
        period=date(start.year, start.month, 1),
        quantity_micro=8 * 60 * minutes * 1_000_000,
        payload_hash="0" * 64,
        received_at=start,
        **fields,
    )


def test_the_spans_cover_every_row_however_it_was_inserted(ingest):
    ensure_partitions_for({SEP, OCT})
    tenant, other = uuid.uuid4(), uuid.uuid4()
    # through ingest (one statement per batch), across a month boundary (split into two rows)
    ingest([make_event(tenant_id=tenant, start=datetime(2026, 9, 30, 23, 30, tzinfo=UTC), seconds=3600)])
    ingest([make_event(tenant_id=tenant, start=START, seconds=600)])
    allocation = UsageEvent.objects.using("ledger").filter(tenant_id=tenant).values_list("allocation_id", flat=True)[0]
    node = UsageEvent.objects.using("ledger").filter(tenant_id=tenant).values_list("node_id", flat=True)[0]
    # the ORM, one row and many, earlier and later than what the pair had (the span widens)
    _row(tenant, allocation, node, START - timedelta(days=2)).save(using="ledger")
    UsageEvent.objects.using("ledger").bulk_create(
        [_row(tenant, allocation, node, START + timedelta(days=3)), _row(other, allocation, node, START)]
    )
    # and plain SQL: every row again under another allocation, three pairs in one statement
    connection = connections["ledger"]
    moved = UsageEvent._meta.get_field("allocation_id").get_db_prep_value(uuid.uuid4(), connection)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO billing_usageevent ({COLUMNS}) SELECT 'sql-' || event_id, part, tenant_id, %s, node_id, "
            'sku, start, "end", period, quantity_micro, unit, payload_hash, received_at FROM billing_usageevent',
            [moved],
        )
    spans = _spans()
    assert spans == _from_rows()
    assert len(spans) == 6  # the ingested pair's September and October, `other`'s, and the three moved
    # October's part of the event that crossed the month, to the ORM's latest row
    assert spans[(OCT, allocation, node, tenant)][:2] == (
        datetime(2026, 10, 1, tzinfo=UTC),
        START + timedelta(days=3, minutes=1),
    )


def test_a_rolled_back_insert_leaves_no_span():
    ensure_partitions_for({OCT})
    pair = (uuid.uuid4(), uuid.uuid4(), uuid.uuid4())
    with pytest.raises(RuntimeError), transaction.atomic(using="ledger"):
        UsageEvent.objects.using("ledger").bulk_create([_row(*pair, START)])
        assert len(_spans()) == 1
        raise RuntimeError
    assert _spans() == {} == _from_rows()


def test_a_span_wider_than_the_runs_rows_has_the_rows_decide(ingest):
    """The pair's span also covers a row already held and a row above the run's watermark, both
    outside its membership: the run reads the pair's rows, holds nothing more and bills the rest."""
    tenant = uuid.uuid4()
    ingest([make_event(tenant_id=tenant, start=START, seconds=3600)])
    ingest([make_event(tenant_id=tenant, start=START + timedelta(days=2), seconds=3600)], history=False)
    first = run_billing(period=OCT, finalize=False, actor="test").run
    assert UsageDispute.objects.using("ledger").count() == 1  # the row outside the membership
    [(first_start, last_end)] = UsageSpan.objects.using("ledger").values_list("first_start", "last_end")
    assert (first_start, last_end) == (START, START + timedelta(days=2, hours=1))
    again = run_billing(period=OCT, finalize=False, actor="test").run
    assert UsageDispute.objects.using("ledger").count() == 1
    assert again.output_hash == first.output_hash
