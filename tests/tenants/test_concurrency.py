"""Real concurrency on PostgreSQL: threads, each with its own connection."""

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection, transaction

from fleet.choices import Lifecycle
from fleet.models import Node, NodeType
from tenants.models import Allocation, AllocationNode
from tenants.services.placement import InsufficientCapacity

from .conftest import tenant_client

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def _in_thread(fn):
    def run(*args):
        try:
            return fn(*args)
        finally:
            connection.close()

    return run


def test_fifty_retries_with_one_key_create_one_allocation(tenant_a):
    from devtools.services.fleet_seed import seed_fleet

    seed_fleet(gpus=64)
    clients = [tenant_client(tenant_a) for _ in range(50)]
    body = {"name": "train", "instance_type": "h100-sxm-8x", "node_count": 2}
    barrier = threading.Barrier(50)

    @_in_thread
    def create(client):
        barrier.wait()
        r = client.post("/api/v1/allocations", body, format="json", HTTP_IDEMPOTENCY_KEY="retry-me")
        return r.status_code, r.json()

    with ThreadPoolExecutor(50) as pool:
        answers = list(pool.map(create, clients))
    assert Allocation.objects.count() == 1
    created = Allocation.objects.get()
    statuses = [s for s, _ in answers]
    assert set(statuses) <= {202, 409}
    for status, body_ in answers:
        if status == 202:
            assert body_["id"] == str(created.pk)
        else:
            assert body_["code"] == "idempotency_key_in_use"
    assert statuses.count(202) >= 1


def test_two_hundred_placements_for_one_hundred_nodes(tenant_a):
    from devtools.services.fleet_seed import seed_fleet
    from tenants.services.placement import place_allocation

    seed_fleet(gpus=800)
    assert Node.objects.filter(lifecycle=Lifecycle.AVAILABLE).count() == 100
    node_type = NodeType.objects.get(slug="h100-sxm-8x")
    allocations = [
        Allocation.objects.create(tenant=tenant_a, name=f"a{i}", instance_type=node_type, node_count=1)
        for i in range(200)
    ]
    barrier = threading.Barrier(32)

    @_in_thread
    def place(allocation):
        if allocation.name in {f"a{i}" for i in range(32)}:
            barrier.wait()
        try:
            with transaction.atomic():
                return len(place_allocation(allocation))
        except InsufficientCapacity:
            return 0

    with ThreadPoolExecutor(32) as pool:
        placed = list(pool.map(place, allocations))
    assert sum(placed) == 100 and placed.count(1) == 100
    live = list(AllocationNode.objects.filter(ended_at__isnull=True).values_list("node_id", flat=True))
    assert len(live) == 100 and len(set(live)) == 100
    assert Node.objects.filter(lifecycle=Lifecycle.PROVISIONING).count() == 100
    assert Node.objects.filter(lifecycle=Lifecycle.AVAILABLE).count() == 0
