"""The SLA window ends when the allocation has its GPUs back: a replacement placed 20 ms after
the pull ends it there, not at the pulled node's repair hours later."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from billing.models import Adjustment
from health.models import Incident, IncidentImpact
from health.services.incidents import settle_credits
from tenants.models import Allocation, AllocationNode, Tenant

pytestmark = pytest.mark.django_db(databases=["default", "ledger"])
PULLED = datetime(2026, 9, 10, 2, tzinfo=UTC)


@pytest.fixture
def impact(nodes):
    pulled, spare = nodes[0], nodes[1]
    tenant = Tenant.objects.create(slug="acme", name="Acme")
    allocation = Allocation.objects.create(
        tenant=tenant,
        name="train",
        instance_type=pulled.node_type,
        node_count=1,
        fabric_domain=pulled.fabric_domain,
        state="active",
    )
    AllocationNode.objects.create(
        allocation=allocation,
        node=pulled,
        started_at=PULLED - timedelta(days=1),
        ended_at=PULLED,
        end_reason="replaced: health",
    )
    incident = Incident.objects.create(
        title="xid 79", opened_by="policy", severity="fatal", opened_at=PULLED, attribution="provider"
    )
    incident.nodes.set([pulled])
    return IncidentImpact.objects.create(
        incident=incident, node=pulled, allocation=allocation, tenant=tenant, gpus=8, start=PULLED
    ), spare


def test_a_replacement_20_ms_later_ends_the_window_there(impact):
    impact, spare = impact
    AllocationNode.objects.create(
        allocation=impact.allocation, node=spare, role="replacement", started_at=PULLED + timedelta(milliseconds=20)
    )
    settle_credits(node_ids=[impact.node_id], end=PULLED + timedelta(hours=5), actor="test")
    [credit] = Adjustment.objects.filter(kind="sla_credit")
    assert credit.end - credit.start == timedelta(milliseconds=20)
    assert credit.quantity_micro == 8 * 20_000  # 8 GPUs × 20 ms, in GPU-µs
    assert credit.amount == Decimal("-0.000104")  # 0.16 GPU-s × 2.35 / 3600, not 5 h (−94.00)
    impact.refresh_from_db()
    assert impact.credited and impact.end == PULLED + timedelta(milliseconds=20)


def test_without_a_replacement_the_window_runs_to_the_repair(impact):
    impact, _ = impact
    settle_credits(node_ids=[impact.node_id], end=PULLED + timedelta(hours=5), actor="test")
    [credit] = Adjustment.objects.filter(kind="sla_credit")
    assert credit.end - credit.start == timedelta(hours=5) and credit.amount == Decimal("-94.000000")


def test_a_tenant_attributed_incident_earns_no_credit(impact):
    impact, _ = impact
    Incident.objects.filter(pk=impact.incident_id).update(attribution="tenant")
    settle_credits(node_ids=[impact.node_id], end=PULLED + timedelta(hours=5), actor="test")
    assert not Adjustment.objects.exists()
    impact.refresh_from_db()
    assert impact.credited  # settled: no credit under the policy, never asked again
