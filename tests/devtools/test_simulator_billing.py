"""An accelerated simulator still meters and bills: `--speed` compresses durations, never the
clock, so every meter event ends before the ledger's clock and is accepted, and the draft
invoice of the month grows with it."""

import threading
import time
from datetime import UTC, datetime

import pytest
from django.db import connections

from billing.models import Invoice, RejectedMeterEvent, UsageEvent
from billing.services.runs import run_billing
from devtools.simulator import FleetSimulator
from fleet.choices import Lifecycle
from fleet.models import Node
from tests.fleet.lifecycle_helpers import allocate, place

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "ledger"])


@pytest.fixture
def ledger_emptied_after(live_server):
    """The ledger's append-only triggers refuse the flush a transactional test ends with: empty
    its tables first, with the triggers set aside (and put back) for the cleanup only."""
    yield
    ledger = connections["ledger"]
    tables = ledger.introspection.table_names()
    with ledger.cursor() as cursor:
        if ledger.vendor == "sqlite":
            cursor.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger'")
            triggers = cursor.fetchall()
            for name, _ in triggers:
                cursor.execute(f'DROP TRIGGER "{name}"')
            cursor.execute("PRAGMA foreign_keys = OFF")
            for table in tables:
                cursor.execute(f'DELETE FROM "{table}"')
            cursor.execute("PRAGMA foreign_keys = ON")
            for _, sql in triggers:
                cursor.execute(sql)
        else:
            # Left set on purpose: the flush that follows runs on this connection and would
            # TRUNCATE the append-only tables; a transactional test closes its connections
            # right after that flush, so the next test gets the triggers back.
            cursor.execute("SET session_replication_role = replica")
            for table in tables:
                cursor.execute(f'DELETE FROM "{table}"')


def _draft_total() -> float:
    return float(sum(i.total for i in Invoice.objects.filter(status="draft")))


def _run_for(simulator: FleetSimulator, seconds: float, *, until_events: int) -> None:
    stop = threading.Event()
    lanes = simulator.run(stop, tick=0.2)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and UsageEvent.objects.count() < until_events:
        time.sleep(0.3)
    stop.set()
    for lane in lanes:
        lane.result()


def test_at_speed_60_metered_usage_and_the_draft_invoice_grow(live_server, ledger_emptied_after):
    from devtools.services.fleet_seed import seed_fleet

    seed_fleet(gpus=16)
    node = place(Node.objects.order_by("hostname").first(), Lifecycle.ACTIVE)
    allocate(node)
    simulator = FleetSimulator(
        url=live_server.url, speed=60.0, seed=2, hostnames=[node.hostname], workers=1, meter_interval=1.0
    )
    simulator.refresh(datetime.now(UTC))
    try:
        # 8 wall seconds are 8 simulated minutes at speed 60: a simulated clock would stamp
        # events up to 480 s ahead of the ledger's, past its 300 s skew allowance.
        _run_for(simulator, 8.0, until_events=10**6)
        first = UsageEvent.objects.count()
        period = datetime.now(UTC).date().replace(day=1)
        run_billing(period=period, finalize=False, actor="test")
        before = _draft_total()
        _run_for(simulator, 4.0, until_events=first + 3)
    finally:
        simulator.close()
    assert not RejectedMeterEvent.objects.exists(), list(RejectedMeterEvent.objects.values("code", "detail")[:3])
    assert first >= 3 and UsageEvent.objects.count() > first
    assert UsageEvent.objects.filter(end__gt=datetime.now(UTC)).count() == 0  # nothing from the future
    assert before > 0
    run_billing(period=period, finalize=False, actor="test")
    assert _draft_total() > before
