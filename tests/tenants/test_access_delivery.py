"""The issue's acceptance walk: a tenant registers keys, creates an allocation with a volume, the
simulated agents (real agent code, real HTTP) receive exactly that tenant's keys and volumes,
report `ready`, the allocation goes `active` with an address and an `ssh` line per node; a key
deleted while it is live leaves the nodes' desired-state and the agents confirm it; another
tenant's key or volume id is 404 and nothing of it is delivered."""

from datetime import UTC, datetime, timedelta

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from rest_framework.test import APIClient

from core.api.agent_tokens import mint_agent_token
from devtools.services.demo_software import golden_versions
from devtools.simulator import FleetSimulator
from fleet.models import Node, NodeType
from fleet.services.baselines import create_baseline
from fleet.services.reconcile import reconcile_nodes
from tenants.models import Allocation
from tenants.services.allocation_loop import run_allocation_loop
from tenants.services.tenants import create_tenant

from .conftest import tenant_client

pytestmark = pytest.mark.django_db(transaction=True)


def new_key() -> str:
    key = ed25519.Ed25519PrivateKey.generate().public_key()
    return key.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()


def post(client, path, body, key):
    response = client.post(path, body, format="json", HTTP_IDEMPOTENCY_KEY=key)
    assert response.status_code in (201, 202), response.content
    return response.json()


def desired_state(node: Node) -> dict:
    agent = APIClient()
    agent.credentials(HTTP_AUTHORIZATION=f"Bearer {mint_agent_token(node.pk)}")
    response = agent.get("/api/agent/v1/desired-state")
    assert response.status_code == 200
    return response.json()


def run_until(simulator, now, done, *, seconds=240, step=5):
    for _ in range(seconds // step):
        simulator.step(now)
        reconcile_nodes()
        run_allocation_loop()
        now += timedelta(seconds=step)
        if done():
            return now
    raise AssertionError("the fleet did not get there in time")


def test_from_key_registration_to_ssh_and_a_key_deleted_while_live(live_server):
    from devtools.services.fleet_seed import seed_fleet

    seed_fleet(gpus=32)
    node_type = NodeType.objects.get(slug="h100-sxm-8x")
    image = create_baseline(
        node_type=node_type,
        name="2026.11",
        versions=golden_versions(node_type),
        actor="test",
        golden=True,
    )
    acme = create_tenant(slug="acme", name="Acme", max_nodes=8, actor="test", max_volumes=4, max_storage_gb=10_000)[0]
    globex = create_tenant(slug="globex", name="Globex", max_nodes=8, actor="test", max_volumes=4)[0]
    client, other = tenant_client(acme), tenant_client(globex)

    laptop = post(client, "/api/v1/ssh-keys", {"name": "laptop", "public_key": new_key()}, "k1")
    ci = post(client, "/api/v1/ssh-keys", {"name": "ci", "public_key": new_key()}, "k2")
    theirs = post(other, "/api/v1/ssh-keys", {"name": "theirs", "public_key": new_key()}, "k3")
    their_volume = post(other, "/api/v1/volumes", {"name": "theirs", "size_gb": 10}, "v0")
    volume = post(client, "/api/v1/volumes", {"name": "datasets", "size_gb": 500}, "v1")
    assert client.get("/api/v1/images").json()["results"][0]["id"] == str(image.pk)

    body = {"name": "train", "instance_type": "h100-sxm-8x", "node_count": 2, "volume_ids": [volume["id"]]}
    for wrong in ({"ssh_key_ids": [theirs["id"]]}, {"volume_ids": [their_volume["id"]]}):
        refused = client.post("/api/v1/allocations", {**body, **wrong}, format="json", HTTP_IDEMPOTENCY_KEY="bad")
        assert refused.status_code == 404, refused.content
    assert not Allocation.objects.exists()

    allocation = post(client, "/api/v1/allocations", body, "a1")
    assert allocation["ssh_key_ids"] == sorted([laptop["id"], ci["id"]])
    assert allocation["image"] == str(image.pk) and allocation["user"] == "ubuntu"

    simulator = FleetSimulator(url=live_server.url, speed=60.0, seed=11)
    now = datetime.now(UTC)
    simulator.refresh(now)

    def fetch():
        return client.get(f"/api/v1/allocations/{allocation['id']}").json()

    now = run_until(simulator, now, lambda: fetch()["state"] == "active")
    active = fetch()
    assert len(active["nodes"]) == 2
    for n in active["nodes"]:
        node = Node.objects.get(pk=n["id"])
        assert n["address"] == node.data_address and n["ssh"] == f"ssh ubuntu@{node.data_address}"
        assert n["ready"] and n["access_confirmed"]
        assert sorted(n["facts"]["authorized_keys"]) == sorted([laptop["fingerprint"], ci["fingerprint"]])
        access = desired_state(node)["access"]
        assert {k["fingerprint"] for k in access["keys"]} == {laptop["fingerprint"], ci["fingerprint"]}
        assert all(set(k) == {"id", "fingerprint", "public_key"} for k in access["keys"])  # public only
        assert [m["volume_id"] for m in access["mounts"]] == [volume["id"]]
        assert theirs["fingerprint"] not in str(access) and their_volume["id"] not in str(access)
        assert access["image"]["versions"] == golden_versions(node_type)
        assert access["user"] == "ubuntu"

    # the CI key is deleted while the allocation runs: it leaves desired-state, the agents confirm
    assert client.delete(f"/api/v1/ssh-keys/{ci['id']}").status_code == 204
    nodes = [Node.objects.get(pk=n["id"]) for n in active["nodes"]]
    for node in nodes:
        assert [k["fingerprint"] for k in desired_state(node)["access"]["keys"]] == [laptop["fingerprint"]]
    assert not all(n["access_confirmed"] for n in fetch()["nodes"])
    run_until(simulator, now, lambda: all(n["access_confirmed"] for n in fetch()["nodes"]))
    for n in fetch()["nodes"]:
        assert n["facts"]["authorized_keys"] == [laptop["fingerprint"]]
    assert fetch()["ssh_key_ids"] == [laptop["id"]]
