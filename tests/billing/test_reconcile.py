"""billing_reconcile: allocations without metering and metering without allocation."""

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from .conftest import LEDGER_DBS, make_event, store_events

pytestmark = pytest.mark.django_db(databases=LEDGER_DBS)
SEPT = datetime(2026, 9, 1, tzinfo=UTC)


def test_reconcile_flags_gaps_both_ways(tenants, small_fleet, capsys):
    from fleet.models import Node
    from tenants.models import Allocation, AllocationNode

    acme = tenants[0]
    metered_node, silent_node = Node.objects.order_by("hostname")[:2]
    allocation = Allocation.objects.create(
        tenant=acme, name="train", instance_type=metered_node.node_type, node_count=2, state="active"
    )
    for node in (metered_node, silent_node):
        AllocationNode.objects.create(
            allocation=allocation, node=node, started_at=SEPT + timedelta(days=1), ended_at=SEPT + timedelta(days=3)
        )

    orphan_allocation = uuid.uuid4()
    store_events(
        silent_node.pk, [make_event(tenant_id=acme.pk, allocation_id=orphan_allocation, start=SEPT + timedelta(days=5))]
    )
    store_events(
        metered_node.pk, [make_event(tenant_id=acme.pk, allocation_id=allocation.pk, start=SEPT + timedelta(days=2))]
    )

    with pytest.raises(CommandError) as failed:
        call_command("billing_reconcile", "--period", "2026-09")
    assert failed.value.returncode == 1
    out = capsys.readouterr().out
    assert "allocations with no metering: 1" in out and f"node {silent_node.pk}" in out
    assert "metering with no allocation: 1" in out and str(orphan_allocation) in out


def test_reconcile_passes_when_everything_matches(tenants, small_fleet, capsys):
    from fleet.models import Node
    from tenants.models import Allocation, AllocationNode

    node = Node.objects.first()
    allocation = Allocation.objects.create(tenant=tenants[0], name="x", instance_type=node.node_type, node_count=1)
    AllocationNode.objects.create(allocation=allocation, node=node, started_at=SEPT, ended_at=SEPT + timedelta(hours=1))
    store_events(node.pk, [make_event(tenant_id=tenants[0].pk, allocation_id=allocation.pk, start=SEPT)])
    call_command("billing_reconcile", "--period", "2026-09")
    assert "no gaps" in capsys.readouterr().out
    with pytest.raises(CommandError):
        call_command("billing_reconcile", "--period", "nope")
