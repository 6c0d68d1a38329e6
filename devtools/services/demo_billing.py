"""The demo's billing history: 60 days of metered usage for two tenants, an SLA credit, past
months finalized in order and this month as an upcoming draft. Idempotent: event ids are
deterministic, so a second run only re-sends duplicates and re-rates the current draft.

The usage comes as real usage does: each node's events carry the metering grant of its
allocation and arrive an hour after they end, and the allocation history (past memberships of
the fleet's first nodes) is recorded, so billing's reconciliation finds nothing to dispute."""

import random
import uuid
from datetime import UTC, datetime, timedelta

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from billing.grants import MeteringGrant, sign_grant
from billing.models import BillingRun
from billing.periods import period_end, period_of
from billing.services.credits import record_sla_credit
from billing.services.ingest import ingest_meter_events
from billing.services.runs import grace_ends, run_billing
from core.services.audit import record_audit
from fleet.models import Node, NodeType
from tenants.models import Allocation, AllocationNode, Membership, Tenant

HISTORY_DAYS = 60
METER_SECONDS = 3600  # hourly events keep the demo ledger small (~40k rows); agents default to 60 s
DAY_BATCH = 24  # hourly events, a day per batch: each arrives well inside the ledger's age window
DEMO_PORTAL_PASSWORD = "hangar-demo"
NAMESPACE = uuid.UUID("5d1b1f1e-8e0a-4c54-9a43-1a7e2b7f0c11")
# (tenant slug, allocation name, sku, nodes, GPUs per node, busy fraction of hours). Every SKU is
# one the demo fleet has (seed_demo_fleet builds H100 nodes only): the history runs on real nodes,
# and an invoice for a generation the fleet never had would contradict the fleet pages.
WORKLOADS = (
    ("acme", "pretrain-70b", "h100-sxm-8x", 4, 8, 0.97),
    ("acme", "eval-sweeps", "h100-sxm-8x", 2, 8, 0.45),
    ("globex", "finetune", "h100-sxm-8x", 2, 8, 0.70),
)


@transaction.atomic
def _demo_tenants(stdout) -> dict:

    tenants = {}
    for slug in sorted({w[0] for w in WORKLOADS}):
        tenant, created = Tenant.objects.get_or_create(slug=slug, defaults={"name": slug.capitalize()})
        if created:
            record_audit(actor="system:demo", action="tenant.create", target=tenant, after={"slug": slug})
        user, created = get_user_model().objects.get_or_create(username=f"{slug}-admin")
        if created:
            user.set_password(DEMO_PORTAL_PASSWORD)
            user.save()
            Membership.objects.create(tenant=tenant, user=user, role="admin")
            stdout.write(f"  portal login created: {slug}-admin / {DEMO_PORTAL_PASSWORD}")
        tenants[slug] = tenant
    return tenants


@transaction.atomic
def _history(tenants: dict, first_hour: datetime, last_hour: datetime) -> dict[tuple[str, str, int], uuid.UUID]:
    """The demo allocations (released) and their nodes' past memberships; returns which fleet node
    ran which workload's n-th node. Without a fleet the usage has no history: billing holds it
    as disputed (which the console's disputes page then shows)."""
    fleet_nodes = list(Node.objects.order_by("hostname")[: sum(w[3] for w in WORKLOADS)])
    placed = {}
    for slug, name, sku, node_count, _gpus, _busy in WORKLOADS:
        allocation, _ = Allocation.objects.get_or_create(
            pk=uuid.uuid5(NAMESPACE, f"{slug}/{name}"),
            defaults={
                "tenant": tenants[slug],
                "name": name,
                "instance_type": NodeType.objects.get(slug=sku),
                "node_count": node_count,
                "state": "released",
                "activated_at": first_hour,
                "ended_at": last_hour,
            },
        )
        for n in range(node_count):
            if not fleet_nodes:
                break
            node = fleet_nodes.pop(0)
            AllocationNode.objects.get_or_create(
                allocation=allocation,
                node=node,
                defaults={"started_at": first_hour, "ended_at": last_hour, "end_reason": "demo history"},
            )
            placed[(slug, name, n)] = node.pk
    return placed


def _events(tenants: dict, now: datetime) -> dict[uuid.UUID, list[dict]]:
    """{node_id: events}, deterministic for a given hour."""

    rng = random.Random(7)
    first_hour = (now - timedelta(days=HISTORY_DAYS)).replace(minute=0, second=0, microsecond=0)
    last_hour = now.replace(minute=0, second=0, microsecond=0)
    hours = int((last_hour - first_hour) / timedelta(hours=1))
    placed = _history(tenants, first_hour, last_hour)
    by_node: dict[uuid.UUID, list[dict]] = {}
    for slug, name, sku, node_count, gpus, busy in WORKLOADS:
        allocation = uuid.uuid5(NAMESPACE, f"{slug}/{name}")
        for n in range(node_count):
            node = placed.get((slug, name, n)) or uuid.uuid5(NAMESPACE, f"{slug}/{name}/node{n}")
            grant = sign_grant(
                MeteringGrant(
                    node_id=node,
                    tenant_id=tenants[slug].pk,
                    allocation_id=allocation,
                    sku=sku,
                    gpus=gpus,
                    valid_from=first_hour,
                    valid_until=last_hour,
                )
            )
            events = by_node.setdefault(node, [])
            for h in range(hours):
                if rng.random() > busy:
                    continue
                start = first_hour + timedelta(hours=h)
                events.append(
                    {
                        "event_id": f"demo-{allocation}-{n}-{int(start.timestamp())}",
                        "allocation_id": str(allocation),
                        "tenant_id": str(tenants[slug].pk),
                        "sku": sku,
                        "start": start.strftime("%Y-%m-%dT%H:%M:%SZ"),
                        "end": (start + timedelta(seconds=METER_SECONDS)).strftime("%Y-%m-%dT%H:%M:%SZ"),
                        "quantity": str(gpus * METER_SECONDS),
                        "unit": "gpu_second",
                        "grant": grant,
                    }
                )
    return by_node


def seed_demo_billing(stdout) -> None:
    now = timezone.now()
    tenants = _demo_tenants(stdout)
    accepted = duplicates = 0
    by_node = _events(tenants, now)
    for node_id, events in by_node.items():
        for i in range(0, len(events), DAY_BATCH):  # a day's events at a time, as a node sends them
            batch = events[i : i + DAY_BATCH]
            arrived = datetime.fromisoformat(batch[-1]["end"].replace("Z", "+00:00")) + timedelta(hours=1)
            result = ingest_meter_events(node_id=node_id, events=batch, received_at=min(arrived, now))
            accepted, duplicates = accepted + result.accepted, duplicates + result.duplicates
    stdout.write(f"  meter events: {accepted} new, {duplicates} already in the ledger")
    # One provider-caused outage last month: a node of acme's training run was down for 3 hours.
    outage = period_of(now - timedelta(days=31))
    outage_start = datetime(outage.year, outage.month, 12, 9, tzinfo=UTC)
    node_id = next(iter(by_node))
    record_sla_credit(
        tenant_id=tenants["acme"].pk,
        allocation_id=uuid.uuid5(NAMESPACE, "acme/pretrain-70b"),
        node_id=node_id,
        start=outage_start,
        end=outage_start + timedelta(hours=3),
        gpus=8,
        reason="node pulled for XID 79 (GPU fell off the bus)",
        incident_id="demo-incident-1",
        sku="h100-sxm-8x",
    )
    current = period_of(now)
    finalized = set(BillingRun.objects.using("ledger").filter(finalize=True).values_list("period", flat=True))
    period = period_of(now - timedelta(days=HISTORY_DAYS))
    while period < current:
        if period not in finalized and grace_ends(period) <= now:  # a month in its grace period stays a draft
            run = run_billing(period=period, finalize=True, actor="system:demo").run
            stdout.write(f"  {period:%Y-%m} finalized: {run.invoices} invoice(s)")
        period = period_of(period_end(period))
    run = run_billing(period=current, finalize=False, actor="system:demo").run
    stdout.write(f"  {current:%Y-%m} draft: {run.invoices} invoice(s)")
