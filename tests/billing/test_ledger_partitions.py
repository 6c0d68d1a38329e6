"""The usage ledger partitioned by month (PostgreSQL): partitions made ahead and on demand, still
append-only, and closed months archived, restored and dropped without changing an invoice."""

import gzip
import uuid
from datetime import UTC, date, datetime, timedelta
from io import StringIO
from unittest import mock

import pytest
from django.core.management import CommandError, call_command
from django.db import DatabaseError, connections, transaction

from billing.models import Invoice, LedgerArchiveAction, LedgerArchiveRecord, UsageDispute, UsageEvent, UsageSpan
from billing.partitions import attached_partitions, is_partitioned, partition_name
from billing.reconcile import reconcile
from billing.services.ingest import EventConflict, ingest_meter_events
from billing.services.ledger_partitions import (
    ArchiveRefused,
    archive_month,
    drop_archived_month,
    ensure_partitions_for,
    ensure_usage_partitions,
    months_wanted,
    restore_month,
)
from billing.services.runs import BillingRunError, run_billing
from billing.statement import invoice_statement
from core.models import AuditEvent
from tenants.models import Tenant

from .conftest import LEDGER_DBS, granted, make_event

pytestmark = [
    pytest.mark.django_db(databases=LEDGER_DBS),
    pytest.mark.skipif(
        connections["ledger"].vendor != "postgresql",
        reason="monthly partitions are PostgreSQL's; SQLite keeps the ledger in one table",
    ),
]
LEDGER = connections["ledger"]
JUNE, JULY = date(2025, 6, 1), date(2025, 7, 1)
AFTER_JUNE, AFTER_JULY = datetime(2025, 7, 2, tzinfo=UTC), datetime(2025, 8, 2, tzinfo=UTC)
NOW = datetime(2026, 12, 2, tzinfo=UTC)


def _june_usage(ingest, tenant, n=3):
    return ingest(
        [make_event(tenant_id=tenant, start=datetime(2025, 6, 10, tzinfo=UTC) + timedelta(hours=i)) for i in range(n)]
    )


def _billed_june(ingest):
    """June usage for two tenants (three 8-GPU minutes each), finalized."""
    tenants = [uuid.uuid4(), uuid.uuid4()]
    for tenant in tenants:
        _june_usage(ingest, tenant)
    run_billing(period=JUNE, finalize=True, actor="test", now=AFTER_JUNE)
    return tenants


def _statement_total(invoice):
    return invoice_statement(invoice, Tenant.objects.get(pk=invoice.tenant_id)).total_due


def _truncate(table):
    with transaction.atomic(using="ledger"), LEDGER.cursor() as cursor:
        cursor.execute(f"TRUNCATE {table}")


def test_the_ledger_is_partitioned_and_the_beat_task_makes_months_ahead():
    assert is_partitioned(LEDGER)
    created = ensure_usage_partitions(now=datetime(2031, 5, 20, tzinfo=UTC))
    wanted = months_wanted(datetime(2031, 5, 20, tzinfo=UTC))
    assert wanted[0] == date(2031, 4, 1) and wanted[-1] == date(2031, 8, 1)  # oldest accepted → 3 ahead
    assert created == [partition_name(m) for m in wanted]
    assert set(wanted) <= set(attached_partitions(LEDGER))
    assert ensure_usage_partitions(now=datetime(2031, 5, 20, tzinfo=UTC)) == []  # idempotent


def test_a_batch_for_a_month_without_a_partition_makes_it_and_is_stored(node_id):
    assert date(2032, 3, 1) not in attached_partitions(LEDGER)
    tenant = uuid.uuid4()
    batch = granted(
        [make_event(tenant_id=tenant, start=datetime(2032, 3, 31, 23, 30, tzinfo=UTC), seconds=3600)], node_id
    )
    result = ingest_meter_events(node_id=node_id, events=batch, received_at=datetime(2032, 4, 1, 1, tzinfo=UTC))
    assert result.accepted == 1
    # The event crosses midnight into April: both months got a partition, one piece each.
    assert {date(2032, 3, 1), date(2032, 4, 1)} <= set(attached_partitions(LEDGER))
    assert sorted(UsageEvent.objects.values_list("period", flat=True)) == [date(2032, 3, 1), date(2032, 4, 1)]
    again = ingest_meter_events(node_id=node_id, events=batch, received_at=datetime(2032, 4, 1, 1, tzinfo=UTC))
    assert (again.accepted, again.duplicates) == (0, 1)


def test_an_event_id_resent_with_another_start_is_a_conflict_across_months(ingest):
    tenant = uuid.uuid4()
    ingest([make_event(tenant_id=tenant, start=datetime(2025, 6, 30, 23, 58, tzinfo=UTC), event_id="same-id")])
    moved = make_event(tenant_id=tenant, start=datetime(2025, 7, 1, 0, 5, tzinfo=UTC), event_id="same-id")
    with pytest.raises(EventConflict):
        ingest([moved])
    assert UsageEvent.objects.filter(event_id="same-id").count() == 1


def test_every_partition_stays_append_only(ingest):
    _june_usage(ingest, uuid.uuid4(), n=1)
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic(using="ledger"):
        UsageEvent.objects.update(quantity_micro=0)
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic(using="ledger"):
        UsageEvent.objects.all().delete()
    for table in ("billing_usageevent", partition_name(JUNE)):
        with pytest.raises(DatabaseError, match="append-only"):
            _truncate(table)
    assert UsageEvent.objects.get().quantity_micro == 480 * 10**6


def test_a_closed_month_is_archived_and_its_invoices_print_the_same(ingest, tmp_path):
    tenants = _billed_june(ingest)
    ingest([make_event(tenant_id=uuid.uuid4(), start=datetime(2025, 7, 5, tzinfo=UTC))])
    june_rows = UsageEvent.objects.filter(period=JUNE).count()
    invoices = {i.pk: (i.total, _statement_total(i)) for i in Invoice.objects.filter(period=JUNE)}
    assert len(invoices) == len(tenants) and june_rows == 6

    record = archive_month(JUNE, actor="ops:alice", export_dir=tmp_path, now=NOW)

    assert (record.action, record.rows, record.quantity_micro) == ("archived", 6, 6 * 480 * 10**6)
    assert record.location == f"ledger_archive.{partition_name(JUNE)}"
    assert JUNE not in attached_partitions(LEDGER)
    assert UsageEvent.objects.filter(period=JUNE).count() == 0
    assert UsageEvent.objects.filter(period=JULY).count() == 1  # the current month is untouched
    with LEDGER.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM {record.location}")
        assert cursor.fetchone()[0] == 6
    # Invoices print from their frozen lines: the same totals without the usage.
    for invoice in Invoice.objects.filter(period=JUNE):
        assert (invoice.total, _statement_total(invoice)) == invoices[invoice.pk]
    # The export holds every row once, in id order, and its hash is recorded.
    lines = gzip.decompress(open(record.export_path, "rb").read()).decode().splitlines()
    assert len(lines) == 1 + 6 and lines[0].startswith("id,event_id,part")
    # The archived rows stay append-only.
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic(using="ledger"):
        with LEDGER.cursor() as cursor:
            cursor.execute(f"UPDATE {record.location} SET quantity_micro = 0")
    assert AuditEvent.objects.filter(action="billing.ledger_month_archived", actor="ops:alice").count() == 1
    # A re-run of June changes nothing; a draft run of an archived month would rate nothing, so
    # it is refused with what to do.
    assert run_billing(period=JUNE, finalize=True, actor="test", now=NOW).created is False


def test_restore_brings_the_month_back_whole_and_drop_needs_the_export(ingest, tmp_path):
    _billed_june(ingest)
    before = sorted(UsageEvent.objects.filter(period=JUNE).values_list("id", "event_id", "quantity_micro"))
    archive_month(JUNE, actor="test", now=NOW)
    with pytest.raises(ArchiveRefused) as err:
        drop_archived_month(JUNE, actor="test")
    assert err.value.code == "no_export"
    restored = restore_month(JUNE, actor="test")
    assert restored.action == LedgerArchiveAction.RESTORED and JUNE in attached_partitions(LEDGER)
    assert sorted(UsageEvent.objects.filter(period=JUNE).values_list("id", "event_id", "quantity_micro")) == before
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic(using="ledger"):
        UsageEvent.objects.filter(period=JUNE).update(quantity_micro=0)  # the parent's trigger again

    archived = archive_month(JUNE, actor="test", export_dir=tmp_path, now=NOW)
    spans = set(UsageSpan.objects.values_list("period", flat=True))
    assert JUNE in spans  # an archived month keeps its usage spans: it can come back
    dropped = drop_archived_month(JUNE, actor="test")
    assert dropped.action == "dropped" and dropped.export_sha256 == archived.export_sha256
    assert set(UsageSpan.objects.values_list("period", flat=True)) == spans - {JUNE}  # its rows are gone
    with pytest.raises(ArchiveRefused) as err:
        restore_month(JUNE, actor="test")
    assert err.value.code == "archive_dropped" and archived.export_path in err.value.detail
    assert list(LedgerArchiveRecord.objects.values_list("action", flat=True)) == [
        "archived",
        "restored",
        "archived",
        "dropped",
    ]
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic(using="ledger"):
        LedgerArchiveRecord.objects.update(rows=0)


def test_a_tampered_archive_is_not_restored(ingest):
    _billed_june(ingest)
    record = archive_month(JUNE, actor="test", now=NOW)
    with LEDGER.cursor() as cursor:
        cursor.execute(f"DROP TRIGGER {partition_name(JUNE)}_archived_append_only ON {record.location}")
        cursor.execute(f"DELETE FROM {record.location} WHERE id = (SELECT min(id) FROM {record.location})")
    with pytest.raises(ArchiveRefused) as err:
        restore_month(JUNE, actor="test")
    assert err.value.code == "archive_altered"
    assert JUNE not in attached_partitions(LEDGER)


def test_only_a_closed_fully_billed_month_may_be_archived(ingest):
    tenant = uuid.uuid4()
    _june_usage(ingest, tenant)
    with pytest.raises(ArchiveRefused, match="never finalized"):
        archive_month(JUNE, actor="test", now=NOW)
    run_billing(period=JUNE, finalize=False, actor="test")
    with pytest.raises(ArchiveRefused, match="draft invoice"):
        archive_month(JUNE, actor="test", now=NOW)
    run_billing(period=JUNE, finalize=True, actor="test", now=AFTER_JUNE)
    with pytest.raises(ArchiveRefused, match="still accepts usage"):
        archive_month(JUNE, actor="test", now=datetime(2025, 7, 9, tzinfo=UTC))
    # Late June usage after June was finalized: billed by July's run, not before.
    ingest([make_event(tenant_id=tenant, start=datetime(2025, 6, 30, 22, tzinfo=UTC))])
    with pytest.raises(ArchiveRefused, match="no finalized run has rated yet"):
        archive_month(JUNE, actor="test", now=NOW)
    run_billing(period=JULY, finalize=True, actor="test", now=AFTER_JULY)
    assert archive_month(JUNE, actor="test", now=NOW).rows == 4
    with pytest.raises(ArchiveRefused) as err:
        archive_month(JUNE, actor="test", now=NOW)
    assert err.value.code == "no_partition"


def test_an_open_dispute_keeps_the_month(ingest):
    _billed_june(ingest)
    event = UsageEvent.objects.filter(period=JUNE).first()
    UsageDispute.objects.create(usage_event=event, tenant_id=event.tenant_id, period=JUNE, reason="test", opened_at=NOW)
    with pytest.raises(ArchiveRefused, match="open usage dispute"):
        archive_month(JUNE, actor="test", now=NOW)


def test_usage_for_an_archived_month_and_a_run_of_it_are_refused(ingest):
    ingest([make_event(tenant_id=uuid.uuid4(), start=datetime(2025, 5, 3, tzinfo=UTC))])
    run_billing(period=date(2025, 5, 1), finalize=True, actor="test", now=datetime(2025, 6, 2, tzinfo=UTC))
    ensure_partitions_for({JUNE})
    archive_month(JUNE, actor="test", now=NOW)  # June had no usage at all: nothing to finalize
    with pytest.raises(BillingRunError) as err:
        run_billing(period=JUNE, finalize=False, actor="test")
    assert err.value.code == "period_archived"
    with pytest.raises(ArchiveRefused) as refused:
        _june_usage(ingest, uuid.uuid4(), n=1)
    assert refused.value.code == "period_archived"
    assert not UsageEvent.objects.filter(period=JUNE).exists()


def test_the_command_lists_asks_and_archives(ingest, tmp_path):
    _billed_june(ingest)
    out = StringIO()
    with pytest.raises(CommandError, match="pass --yes"):
        call_command("archive_ledger_month", "2025-06", stdout=out)  # stdin is not a terminal here
    assert "detach billing_usageevent_y2025m06: 6 usage rows, 0.80 GPU-h" in out.getvalue()
    assert JUNE in attached_partitions(LEDGER)
    with pytest.raises(CommandError, match="YYYY-MM"):
        call_command("archive_ledger_month", "June", "--yes")
    # The command uses the real clock, and June 2025 is long closed.
    call_command("archive_ledger_month", "2025-06", "--yes", "--export-dir", str(tmp_path), stdout=out)
    assert "2025-06 archived: 6 rows" in out.getvalue() and "sha256" in out.getvalue()
    listing = StringIO()
    call_command("archive_ledger_month", "--list", stdout=listing)
    assert "2025-06  archived" in listing.getvalue()
    assert "attached" in listing.getvalue()


def test_the_agent_is_told_409_for_usage_of_an_archived_month(agent_api, node_id, ingest):
    ensure_partitions_for({JUNE})
    archive_month(JUNE, actor="test", now=NOW)
    event = make_event(tenant_id=uuid.uuid4(), start=datetime(2025, 6, 30, 23, tzinfo=UTC))
    with mock.patch("billing.services.ingest.clock.now", return_value=datetime(2025, 7, 1, tzinfo=UTC)):
        response = agent_api.post("/api/agent/v1/meter-events", {"events": granted([event], node_id)}, format="json")
    assert response.status_code == 409, response.content
    assert response.json()["code"] == "period_archived" and "restore" in response.json()["detail"]
    assert not UsageEvent.objects.exists()


def test_usage_readers_name_an_archived_month_instead_of_showing_zero(
    ingest, tenants, acme_api, globex_api, client, django_user_model
):
    from tenants.models import Membership

    acme = tenants[0]
    _june_usage(ingest, acme.pk)
    run_billing(period=JUNE, finalize=True, actor="test", now=AFTER_JUNE)
    june_window = {"start": "2025-06-01T00:00:00Z", "end": "2025-07-01T00:00:00Z"}
    before = acme_api.get("/api/v1/usage", june_window).json()
    assert len(before["results"]) == 1 and before["archived_months"] == []

    archive_month(JUNE, actor="test", now=NOW)

    after = acme_api.get("/api/v1/usage", {"start": "2025-05-15T00:00:00Z", "end": "2025-07-15T00:00:00Z"}).json()
    assert after["results"] == [] and after["archived_months"] == ["2025-06"]
    # A window that ends where June begins does not touch it; another tenant is told the same
    # (the month is archived for everyone) and sees none of Acme's usage.
    may = acme_api.get("/api/v1/usage", {"start": "2025-05-01T00:00:00Z", "end": "2025-06-01T00:00:00Z"}).json()
    assert may["archived_months"] == []
    other = globex_api.get("/api/v1/usage", june_window).json()
    assert other["results"] == [] and other["archived_months"] == ["2025-06"]

    # The portal's 30-day chart, drawn in early July, says June is archived and points to Invoices.
    user = django_user_model.objects.create_user("alice", password="alice-pass-123")
    Membership.objects.create(tenant=acme, user=user, role="member")
    client.force_login(user)
    with mock.patch("billing.views.timezone.now", return_value=datetime(2025, 7, 10, tzinfo=UTC)):
        page = client.get("/portal/usage/")
    assert page.status_code == 200
    assert b'id="usage-archived"' in page.content and b"June 2025" in page.content
    assert b'href="/portal/invoices/"' in page.content
    with mock.patch("billing.views.timezone.now", return_value=datetime(2025, 8, 20, tzinfo=UTC)):
        assert b'id="usage-archived"' not in client.get("/portal/usage/").content  # the window left June


def test_reconciling_an_archived_month_is_refused_not_reported_as_unmetered(ingest):
    _billed_june(ingest)
    archive_month(JUNE, actor="test", now=NOW)
    out = StringIO()
    with pytest.raises(CommandError, match="2025-06 is archived") as refused:
        call_command("billing_reconcile", "--period", "2025-06", stdout=out)
    assert refused.value.returncode == 2 and "--restore" in str(refused.value)
    assert "allocations with no metering" not in out.getvalue()
    restore_month(JUNE, actor="test")
    assert reconcile(period=JUNE).metered_pairs >= 1  # read again from the restored month
