"""Every tenant route and verb with another tenant's ids (path, query, body, page token):
404 (400 for a page token), and nothing changes."""

import pytest

from core.models import AuditEvent, IdempotencyRecord
from fleet.models import FabricDomain
from tenants.models import Allocation, FabricPartition, Volume

pytestmark = pytest.mark.django_db


@pytest.fixture
def b_objects(small_fleet, client_b):
    alloc = client_b.post(
        "/api/v1/allocations",
        {"name": "b", "instance_type": "h100-sxm-8x", "node_count": 1},
        format="json",
        HTTP_IDEMPOTENCY_KEY="b1",
    ).data
    part = client_b.post(
        "/api/v1/fabric-partitions",
        {"name": "bp", "fabric_domain": "dc1-ndr-pod01"},
        format="json",
        HTTP_IDEMPOTENCY_KEY="b2",
    ).data
    vol = client_b.post("/api/v1/volumes", {"name": "bv", "size_gb": 5}, format="json", HTTP_IDEMPOTENCY_KEY="b3").data
    client_b.post("/api/v1/volumes", {"name": "bv2", "size_gb": 5}, format="json", HTTP_IDEMPOTENCY_KEY="b4")
    # A second domain so tenant B has two partitions (and a second page).
    first = FabricDomain.objects.get(name="dc1-ndr-pod01")
    FabricDomain.objects.create(
        site=first.site, name="dc1-ndr-pod99", technology=first.technology, generation=first.generation
    )
    client_b.post(
        "/api/v1/fabric-partitions",
        {"name": "bp2", "fabric_domain": "dc1-ndr-pod99"},
        format="json",
        HTTP_IDEMPOTENCY_KEY="b5",
    )
    for i in range(2):
        client_b.post(
            "/api/v1/allocations",
            {"name": f"b{i}", "instance_type": "h100-sxm-8x", "node_count": 1},
            format="json",
            HTTP_IDEMPOTENCY_KEY=f"bx{i}",
        )
    tokens = {
        path: client_b.get(f"/api/v1/{path}?page_size=1").data["next_page_token"]
        for path in ("allocations", "fabric-partitions", "volumes")
    }
    return {"alloc": alloc["id"], "part": part["id"], "vol": vol["id"], "tokens": tokens}


CASES = [
    # (method, path template, body, expected status)
    ("get", "/api/v1/allocations/{alloc}", None, 404),
    ("post", "/api/v1/allocations/{alloc}/cancel", None, 404),
    ("get", "/api/v1/fabric-partitions/{part}", None, 404),
    ("get", "/api/v1/volumes/{vol}", None, 404),
    ("post", "/api/v1/volumes", {"name": "steal", "size_gb": 1, "export_partition": "{part}"}, 404),
    ("get", "/api/v1/allocations?page_token={tok_allocations}", None, 400),
    ("get", "/api/v1/fabric-partitions?page_token={tok_fabric-partitions}", None, 400),
    ("get", "/api/v1/volumes?page_token={tok_volumes}", None, 400),
    ("get", "/api/v1/allocations/{alloc}/", None, 404),
]


def _fill(text: str, ids: dict) -> str:
    text = text.replace("{alloc}", ids["alloc"]).replace("{part}", ids["part"]).replace("{vol}", ids["vol"])
    for path, token in ids["tokens"].items():
        text = text.replace("{tok_" + path + "}", token)
    return text


def _state():
    return (
        list(Allocation.objects.values_list("id", "state", "cancel_requested_at", "updated_at")),
        FabricPartition.objects.count(),
        Volume.objects.count(),
        AuditEvent.objects.count(),
        IdempotencyRecord.objects.count(),
    )


@pytest.mark.parametrize("method, template, body, status", CASES)
def test_other_tenants_objects_do_not_exist(b_objects, client_a, method, template, body, status):
    before = _state()
    path = _fill(template, b_objects)
    kwargs = {"format": "json", "HTTP_IDEMPOTENCY_KEY": "a-key"}
    if body is not None:
        kwargs["data"] = {k: _fill(v, b_objects) if isinstance(v, str) else v for k, v in body.items()}
    r = getattr(client_a, method)(path, **kwargs)
    assert r.status_code == status, r.content
    assert r.json()["code"] == ("not_found" if status == 404 else "invalid_page_token")
    assert _state() == before


def test_lists_show_only_own_objects(b_objects, client_a):
    for path in ("allocations", "fabric-partitions", "volumes"):
        assert client_a.get(f"/api/v1/{path}").data["results"] == []
    assert client_a.get("/api/v1/tenant").data["usage_now"]["hopper"] == 0
