"""Billing fixtures: tenants with API clients, an agent client, a meter-event factory, and the
metering grants and allocation history real usage comes with."""

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from rest_framework.test import APIClient

from billing.grants import MeteringGrant, sign_grant
from core.api.agent_tokens import mint_agent_token

LEDGER_DBS = ["default", "ledger"]


def rfc(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ").replace(".000000Z", "Z")


def parse(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def allocation_of(tenant_id) -> uuid.UUID:
    """Each tenant's default allocation id in these tests (distinct per tenant)."""
    return uuid.uuid5(uuid.NAMESPACE_URL, f"allocation-of:{tenant_id}")


def make_event(
    *,
    tenant_id,
    allocation_id=None,
    start: datetime,
    seconds: int = 60,
    gpus: int = 8,
    sku: str = "h100-sxm-8x",
    event_id: str | None = None,
) -> dict:
    return {
        "event_id": event_id or str(uuid.uuid4()),
        "allocation_id": str(allocation_id or allocation_of(tenant_id)),
        "tenant_id": str(tenant_id),
        "sku": sku,
        "start": rfc(start),
        "end": rfc(start + timedelta(seconds=seconds)),
        "quantity": str(gpus * seconds),
        "unit": "gpu_second",
    }


def grant_for(event: dict, node_id, *, gpus: int = 8, margin: timedelta = timedelta(hours=1), **override) -> str:
    """The grant the control plane would have issued for this event's allocation on `node_id`."""
    fields = dict(
        node_id=uuid.UUID(str(node_id)),
        tenant_id=uuid.UUID(event["tenant_id"]),
        allocation_id=uuid.UUID(event["allocation_id"]),
        sku=event["sku"],
        gpus=gpus,
        valid_from=parse(event["start"]) - margin,
        valid_until=parse(event["end"]) + margin,
    )
    fields.update(override)
    return sign_grant(MeteringGrant(**fields))


def granted(events: list[dict], node_id) -> list[dict]:
    return [e if "grant" in e else {**e, "grant": grant_for(e, node_id)} for e in events]


def store_events(node_id, events: list[dict]):
    """Ingest as the node's agent would have, with grants, a minute after the last event ended."""
    from billing.services.ingest import ingest_meter_events

    batch = granted(events, node_id)
    arrived = max(parse(e["end"]) for e in batch) + timedelta(minutes=1)
    return ingest_meter_events(node_id=node_id, events=batch, received_at=arrived)


@pytest.fixture
def tenants(db):
    from tenants.models import Tenant

    return Tenant.objects.create(slug="acme", name="Acme"), Tenant.objects.create(slug="globex", name="Globex")


def _tenant_client(tenant, role="viewer"):
    from core.services.tokens import create_api_token

    _, plain = create_api_token(kind="tenant", tenant=tenant, role=role, actor="test")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {plain}")
    return client


@pytest.fixture
def acme_api(tenants):
    return _tenant_client(tenants[0])


@pytest.fixture
def globex_api(tenants):
    return _tenant_client(tenants[1])


@pytest.fixture
def node_id():
    return uuid.uuid4()


@pytest.fixture
def agent_api(node_id):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {mint_agent_token(node_id)}")
    return client


def record_history(events: list[dict], node) -> None:
    """Allocation history matching the events: the tenant, its allocation and the node's
    membership over the events' span (what placement would have written)."""
    from fleet.models import NodeType
    from tenants.models import Allocation, AllocationNode, Tenant

    spans: dict = {}
    for e in events:
        key = (e["tenant_id"], e["allocation_id"], e["sku"])
        lo, hi = spans.get(key, (parse(e["start"]), parse(e["end"])))
        spans[key] = (min(lo, parse(e["start"])), max(hi, parse(e["end"])))
    for (tenant_id, allocation_id, sku), (lo, hi) in spans.items():
        tenant, _ = Tenant.objects.get_or_create(pk=tenant_id, defaults={"slug": f"t-{tenant_id[:12]}", "name": "T"})
        allocation, _ = Allocation.objects.get_or_create(
            pk=allocation_id,
            defaults={
                "tenant": tenant,
                "name": "metered",
                "instance_type": NodeType.objects.get(slug=sku),
                "node_count": 1,
                "state": "active",
            },
        )
        AllocationNode.objects.create(allocation=allocation, node=node, started_at=lo, ended_at=hi)


@pytest.fixture
def metered_node(small_fleet):
    from fleet.models import Node

    return Node.objects.order_by("hostname").first()


@pytest.fixture
def ingest(metered_node, small_fleet):
    """Store events through the ingest service (as the endpoint does, with their grants), a day's
    events at a time, as if each batch arrived a minute after its last event ended; the allocation
    history the events belong to is recorded too (history=False: usage nobody allocated).

    A node's GPUs are billed once per second (the ledger refuses overlapping usage beyond its
    GPU count), so events that overlap in time are sent by different nodes, as usage of one
    allocation's several nodes would be: each event goes to the first node (the metered node
    first) that has nothing overlapping it yet."""
    from billing.services.ingest import ingest_meter_events
    from fleet.models import Node

    pool = [metered_node, *Node.objects.exclude(pk=metered_node.pk).order_by("hostname")]

    def assign(events) -> dict:
        """node → its events: each event to the node that already sent it (a re-send), else to
        the first node with nothing overlapping it in the ledger or in this call (first fit in
        order of start, which needs no more nodes than events overlap at once)."""
        from billing.models import UsageEvent

        spans = [(parse(e["start"]), parse(e["end"])) for e in events]
        lo, hi = min(a for a, _ in spans), max(b for _, b in spans)
        busy: dict = {node.pk: [] for node in pool}
        sent_by: dict = {}
        for event_id, node_id, start, end in UsageEvent.objects.filter(
            node_id__in=list(busy), end__gt=lo, start__lt=hi
        ).values_list("event_id", "node_id", "start", "end"):
            busy[node_id].append((start, end))
            sent_by[event_id] = node_id
        sent_by.update(
            UsageEvent.objects.filter(event_id__in=[e["event_id"] for e in events]).values_list("event_id", "node_id")
        )
        by_pk = {node.pk: node for node in pool}
        out: dict = {}
        for event, (start, end) in sorted(zip(events, spans, strict=True), key=lambda pair: pair[1]):
            node_id = sent_by.get(event["event_id"])
            if node_id is None:
                node_id = next(
                    (n.pk for n in pool if all(end <= a or b <= start for a, b in busy[n.pk])),
                    None,
                )
                if node_id is None:  # more usage at once than the fleet has nodes: one more node
                    extra = Node.objects.create(
                        hostname=f"metered-extra-{len(pool):04d}",
                        serial=f"METERED-EXTRA-{len(pool):04d}",
                        rack=metered_node.rack,
                        u_position=200 + len(pool),
                        node_type=metered_node.node_type,
                    )
                    pool.append(extra)
                    by_pk[extra.pk], busy[extra.pk] = extra, []
                    node_id = extra.pk
                busy[node_id].append((start, end))
                sent_by[event["event_id"]] = node_id
            out.setdefault(by_pk[node_id], []).append(event)
        return out

    def run(events, *, history: bool = True):
        accepted = duplicates = 0
        for node, node_events in assign(events).items():
            if history:
                record_history(node_events, node)
            by_day: dict = {}
            for event in node_events:  # a node sends as it goes: one day's events arrive together
                by_day.setdefault(parse(event["end"]).date(), []).append(event)
            for day_events in by_day.values():
                for i in range(0, len(day_events), 1000):
                    batch = granted(day_events[i : i + 1000], node.pk)
                    arrived = max(parse(e["end"]) for e in batch) + timedelta(minutes=1)
                    result = ingest_meter_events(node_id=node.pk, events=batch, received_at=arrived)
                    assert not result.rejected, result.rejected
                    accepted, duplicates = accepted + result.accepted, duplicates + result.duplicates
        return accepted, duplicates

    return run


OVERRUN_START = datetime(2026, 10, 10, tzinfo=UTC)


@pytest.fixture
def overrun(tenants, small_fleet):
    """acme's allocation held the node for two hours; the grant (issued while it lived) ran eight;
    the agent metered four. Hours three and four are signed but contradicted."""
    from billing.services.ingest import ingest_meter_events
    from fleet.models import Node
    from tenants.models import Allocation, AllocationNode

    node = Node.objects.order_by("hostname").first()
    allocation = Allocation.objects.create(
        tenant=tenants[0], name="x", instance_type=node.node_type, node_count=1, state="released"
    )
    AllocationNode.objects.create(
        allocation=allocation, node=node, started_at=OVERRUN_START, ended_at=OVERRUN_START + timedelta(hours=2)
    )
    grant = sign_grant(
        MeteringGrant(
            node_id=node.pk,
            tenant_id=tenants[0].pk,
            allocation_id=allocation.pk,
            sku="h100-sxm-8x",
            gpus=8,
            valid_from=OVERRUN_START,
            valid_until=OVERRUN_START + timedelta(hours=8),
        )
    )
    events = [
        {
            **make_event(
                tenant_id=tenants[0].pk,
                allocation_id=allocation.pk,
                start=OVERRUN_START + timedelta(hours=h),
                seconds=3600,
            ),
            "grant": grant,
        }
        for h in range(4)
    ]
    result = ingest_meter_events(
        node_id=node.pk, events=events, received_at=OVERRUN_START + timedelta(hours=4, minutes=1)
    )
    assert (result.accepted, result.rejected) == (4, ())
    return {"tenant": tenants[0], "events": events, "node": node}


@pytest.fixture(autouse=True)
def every_invoice_recomputes(request):
    """After every billing test that used the ledger, the independent verifier (billing.verifier,
    written from docs/billing.md) recomputes every live invoice and credit note the test left:
    it must find no difference. `@pytest.mark.unverified` opts a test out (one that corrupts the
    ledger on purpose)."""
    yield
    marker = request.node.get_closest_marker("django_db")
    if marker is None or request.node.get_closest_marker("unverified"):
        return
    databases = marker.kwargs.get("databases") or ()
    if databases != "__all__" and "ledger" not in databases:
        return
    from billing.verifier import verify_billing

    report = verify_billing()
    assert report.ok, "billing verifier:\n" + "\n".join(str(d) for d in report.differences[:20])
