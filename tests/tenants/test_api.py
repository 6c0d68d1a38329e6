"""The tenant API contract (docs/api.md): shapes, validation, quota, capacity, roles, pages, query counts."""

import pytest

from tenants.models import Allocation
from tenants.services.allocation_loop import run_allocation_loop

from .conftest import tenant_client

pytestmark = pytest.mark.django_db
BODY = {"name": "train", "instance_type": "h100-sxm-8x", "node_count": 2, "fabric": "isolated"}


def post(client, path, body, key="key-1"):
    return client.post(path, body, format="json", HTTP_IDEMPOTENCY_KEY=key)


def test_instance_types(small_fleet, client_a):
    r = client_a.get("/api/v1/instance-types/")
    assert r.status_code == 200 and r.data["next_page_token"] is None
    h100 = next(t for t in r.data["results"] if t["name"] == "h100-sxm-8x")
    assert h100["generation"] == "hopper" and h100["gpus_per_node"] == 8 and h100["fabric"] == "ib-ndr"
    assert h100["available_nodes"] == 8 and h100["currency"] == "USD"
    assert h100["price_per_gpu_hour"] == "2.35"  # economics.csv rental_h100 upper bound


@pytest.mark.parametrize(
    "body, field",
    [
        ({**BODY, "node_count": 0}, "node_count"),
        ({**BODY, "node_count": "many"}, "node_count"),
        ({**BODY, "instance_type": "z100"}, "instance_type"),
        ({**BODY, "fabric": "shared"}, "fabric"),
        ({k: v for k, v in BODY.items() if k != "name"}, "name"),
    ],
)
def test_create_validation(small_fleet, client_a, body, field):
    r = post(client_a, "/api/v1/allocations", body)
    assert r.status_code == 400 and r.json()["code"] == "validation_error"
    assert field in {e["field"] for e in r.json()["errors"]}
    assert not Allocation.objects.exists()


def test_create_requires_idempotency_key_and_detects_reuse(small_fleet, client_a):
    r = client_a.post("/api/v1/allocations", BODY, format="json")
    assert r.status_code == 400 and r.json()["code"] == "idempotency_key_missing"
    assert post(client_a, "/api/v1/allocations", BODY, key="same").status_code == 202
    r = post(client_a, "/api/v1/allocations", {**BODY, "node_count": 1}, key="same")
    assert r.status_code == 422 and r.json()["code"] == "idempotency_key_reused"
    assert Allocation.objects.count() == 1


def test_keys_are_scoped_per_tenant(small_fleet, client_a, client_b):
    assert post(client_a, "/api/v1/allocations", BODY, key="shared").status_code == 202
    r = post(client_b, "/api/v1/allocations", BODY, key="shared")
    assert r.status_code == 202 and "Idempotent-Replayed" not in r
    assert Allocation.objects.count() == 2


def test_quota_and_capacity(small_fleet, tenant_a, client_a):
    from tenants.models import Quota

    Quota.objects.filter(tenant=tenant_a).update(max_nodes=3)
    assert post(client_a, "/api/v1/allocations", BODY, key="a").status_code == 202
    r = post(client_a, "/api/v1/allocations", BODY, key="b")
    assert r.status_code == 403 and r.json()["code"] == "quota_exceeded"
    Quota.objects.filter(tenant=tenant_a).update(max_nodes=100)
    r = post(client_a, "/api/v1/allocations", {**BODY, "node_count": 9}, key="c")
    assert r.status_code == 409 and r.json()["code"] == "insufficient_capacity"
    assert Allocation.objects.count() == 1
    tenant = client_a.get("/api/v1/tenant").data
    assert tenant["slug"] == "acme" and tenant["quota"]["hopper"] == 100 and tenant["usage_now"]["hopper"] == 2


def test_roles(small_fleet, tenant_a, ops_api):
    viewer = tenant_client(tenant_a, role="viewer")
    assert viewer.get("/api/v1/allocations").status_code == 200
    for path in ("/api/v1/allocations", "/api/v1/volumes", "/api/v1/fabric-partitions"):
        assert post(viewer, path, BODY).status_code == 403
    assert ops_api.get("/api/v1/allocations").status_code == 403
    assert ops_api.get("/api/v1/tenant").status_code == 403
    from rest_framework.test import APIClient

    assert APIClient().get("/api/v1/allocations").status_code == 401


def test_state_filter_and_bad_pages(small_fleet, client_a):
    post(client_a, "/api/v1/allocations", BODY)
    assert len(client_a.get("/api/v1/allocations?state=pending").data["results"]) == 1
    assert client_a.get("/api/v1/allocations?state=active").data["results"] == []
    r = client_a.get("/api/v1/allocations?state=bogus")
    assert r.status_code == 400 and r.json()["code"] == "validation_error"
    assert client_a.get("/api/v1/allocations?page_size=0").status_code == 400
    r = client_a.get("/api/v1/allocations?page_token=garbage")
    assert r.status_code == 400 and r.json()["code"] == "invalid_page_token"


def test_partitions_and_volumes(small_fleet, client_a):
    r = post(client_a, "/api/v1/fabric-partitions", {"name": "p", "fabric_domain": "nope"})
    assert r.status_code == 400
    r = post(client_a, "/api/v1/fabric-partitions", {"name": "p", "fabric_domain": "dc1-ndr-pod01"})
    assert r.status_code == 201 and r.data["kind"] == "ib_pkey" and r.data["partition_key"] == 1
    pid = r.data["id"]
    r = post(client_a, "/api/v1/fabric-partitions", {"name": "p2", "fabric_domain": "dc1-ndr-pod01"}, key="k2")
    assert r.status_code == 409 and r.json()["code"] == "partition_exists"
    r = post(client_a, "/api/v1/volumes", {"name": "data", "size_gb": 100, "export_partition": pid}, key="v1")
    assert r.status_code == 201 and r.data["export_partition"] == pid
    assert client_a.get(f"/api/v1/volumes/{r.data['id']}").data["size_gb"] == 100
    assert client_a.get(f"/api/v1/fabric-partitions/{pid}").data["name"] == "p"


@pytest.mark.parametrize("count", [3, 12])
def test_list_query_count_is_fixed(small_fleet, tenant_a, client_a, django_assert_max_num_queries, count):
    for i in range(count):
        post(client_a, "/api/v1/allocations", {**BODY, "node_count": 1}, key=f"q{i}")
    run_allocation_loop()
    # token, page, live nodes, replaced nodes, volumes, named keys, the tenant's keys: per page, not per row
    with django_assert_max_num_queries(7):
        r = client_a.get("/api/v1/allocations?page_size=200")
    assert len(r.data["results"]) == count
    assert sum(len(a["nodes"]) for a in r.data["results"]) == min(count, 8)  # 8 nodes in the fleet, FIFO


def test_pagination_walk_with_inserts_sees_no_duplicate_and_no_skip(small_fleet, client_a):
    from fleet.models import NodeType

    node_type = NodeType.objects.get(slug="h100-sxm-8x")
    tenant = client_a.get("/api/v1/tenant").data
    existing = {
        str(Allocation.objects.create(tenant_id=tenant["id"], name=f"a{i}", instance_type=node_type, node_count=1).pk)
        for i in range(23)
    }
    seen, token, inserted = [], None, 0
    while True:
        url = "/api/v1/allocations?page_size=5" + (f"&page_token={token}" if token else "")
        page = client_a.get(url).data
        seen += [a["id"] for a in page["results"]]
        Allocation.objects.create(tenant_id=tenant["id"], name=f"new{inserted}", instance_type=node_type, node_count=1)
        inserted += 1
        token = page["next_page_token"]
        if token is None:
            break
    assert len(seen) == len(set(seen)) and existing <= set(seen)


def test_page_token_from_another_tenant_is_invalid(small_fleet, client_a, client_b):
    for i in range(3):
        post(client_a, "/api/v1/allocations", {**BODY, "node_count": 1}, key=f"t{i}")
    token = client_a.get("/api/v1/allocations?page_size=1").data["next_page_token"]
    r = client_b.get(f"/api/v1/allocations?page_size=1&page_token={token}")
    assert r.status_code == 400 and r.json()["code"] == "invalid_page_token"
    token = client_a.get("/api/v1/allocations?page_size=1&state=pending").data["next_page_token"]
    assert client_a.get(f"/api/v1/allocations?page_size=1&page_token={token}").status_code == 400


def test_agent_token_is_forbidden_on_the_tenant_api(small_fleet):
    from rest_framework.test import APIClient

    from core.api.agent_tokens import mint_agent_token
    from fleet.models import Node

    agent = APIClient()
    agent.credentials(HTTP_AUTHORIZATION=f"Bearer {mint_agent_token(Node.objects.first().pk)}")
    assert agent.get("/api/v1/allocations").status_code == 403
    r = post(agent, "/api/v1/allocations", BODY)
    assert r.status_code == 403 and not Allocation.objects.exists()


@pytest.mark.parametrize("count", [2, 9])
def test_partition_and_volume_lists_have_fixed_query_counts(
    small_fleet, tenant_a, client_a, django_assert_max_num_queries, count
):
    from fleet.models import FabricDomain
    from tenants.services.partitions import create_partition
    from tenants.services.volumes import create_volume

    first = FabricDomain.objects.first()
    for i in range(count):
        domain = FabricDomain.objects.create(
            site=first.site, name=f"pod-x{i}", technology=first.technology, generation=first.generation
        )
        partition = create_partition(tenant=tenant_a, fabric_domain=domain, name=f"p{i}", actor="t")
        create_volume(tenant=tenant_a, name=f"v{i}", size_gb=10, export_partition=partition, actor="t")
    with django_assert_max_num_queries(3):  # token, its last-used stamp, the page
        assert len(client_a.get("/api/v1/fabric-partitions").data["results"]) == count
    with django_assert_max_num_queries(3):  # token, its last-used stamp, the page
        assert len(client_a.get("/api/v1/volumes").data["results"]) == count
