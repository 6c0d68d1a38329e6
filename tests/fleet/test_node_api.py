"""Agent desired-state/action-results and the operator node API."""

import uuid

import pytest
from rest_framework.test import APIClient

from core.api.agent_tokens import mint_agent_token
from fleet.models import Node, NodeAgentAction
from fleet.services.agent_work import request_agent_action
from fleet.services.reconcile import reconcile_nodes

from .lifecycle_helpers import allocate, place
from .software_helpers import report_stack

pytestmark = pytest.mark.django_db


@pytest.fixture
def node(small_fleet):
    return Node.objects.order_by("hostname").first()


def _agent(node_id) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {mint_agent_token(node_id)}")
    return client


def test_desired_state_lists_pending_work_and_the_allocation(node):
    place(node, "wiping")
    membership = allocate(node)
    wipe = request_agent_action(node=node, action="wipe", actor="test")
    body = _agent(node.pk).get("/api/agent/v1/desired-state").json()
    grants = body.pop("metering_grants")
    assert body == {
        "lifecycle": "wiping",
        "allocation_id": str(membership.allocation_id),
        "tenant_id": str(membership.allocation.tenant_id),
        "actions": [{"id": str(wipe.pk), "action": "wipe", "params": {}}],
        "sku": node.node_type.slug,
        "gpus": node.node_type.gpus_per_node,
        "access": None,  # a node being wiped carries no tenant access
    }
    [grant] = grants  # the live membership's, signed for the ledger
    assert {k: grant[k] for k in ("allocation_id", "tenant_id", "sku", "gpus")} == {
        "allocation_id": str(membership.allocation_id),
        "tenant_id": str(membership.allocation.tenant_id),
        "sku": membership.allocation.instance_type.slug,
        "gpus": membership.allocation.instance_type.gpus_per_node,
    }
    assert grant["grant"].startswith("hgm1.") and grant["valid_from"] < grant["valid_until"]


def test_action_result_is_recorded_once_and_the_reconciler_acts(node):
    place(node, "wiping")
    wipe = request_agent_action(node=node, action="wipe", actor="test")
    body = {
        "action_id": str(wipe.pk),
        "action": "wipe",
        "status": "succeeded",
        "detail": "nvme format ok",
        "output": {"drives": 2},
        "finished_at": "2026-11-29T20:00:00Z",
    }
    agent = _agent(node.pk)
    first = agent.post("/api/agent/v1/action-results", body, format="json")
    assert first.status_code == 202 and first.json()["duplicate"] is False
    replay = agent.post("/api/agent/v1/action-results/", {**body, "status": "failed"}, format="json")
    assert replay.status_code == 202 and replay.json()["duplicate"] is True
    wipe.refresh_from_db()
    assert (wipe.state, wipe.detail, wipe.output) == ("succeeded", "nvme format ok", {"drives": 2})
    report_stack(node)  # the wiped node's stack, reported after the wipe began
    reconcile_nodes()
    node.refresh_from_db()
    assert node.lifecycle == "available"
    assert agent.get("/api/agent/v1/desired-state").json()["actions"] == []


def test_action_results_of_another_node_or_unknown_are_404(small_fleet):
    mine, other = Node.objects.order_by("hostname")[:2]
    theirs = request_agent_action(node=other, action="wipe", actor="test")
    body = {"action_id": str(theirs.pk), "action": "wipe", "status": "succeeded"}
    assert _agent(mine.pk).post("/api/agent/v1/action-results", body, format="json").status_code == 404
    assert NodeAgentAction.objects.get(pk=theirs.pk).state == "pending"
    body["action_id"] = str(uuid.uuid4())
    assert _agent(mine.pk).post("/api/agent/v1/action-results", body, format="json").status_code == 404


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"action_id": "x", "action": "wipe", "status": "succeeded"},
        {"action_id": str(uuid.uuid4()), "action": "wipe", "status": "maybe"},
    ],
)
def test_bad_action_result_is_400(node, body):
    response = _agent(node.pk).post("/api/agent/v1/action-results", body, format="json")
    assert response.status_code == 400 and response.json()["code"] == "validation_error"


def test_agent_routes_refuse_other_tokens_and_unknown_nodes(node, ops_api, api):
    assert ops_api.get("/api/agent/v1/desired-state").status_code == 401
    assert api.get("/api/agent/v1/desired-state").status_code == 401
    response = _agent(uuid.uuid4()).get("/api/agent/v1/desired-state")
    assert response.status_code == 404 and response.json()["code"] == "unknown_node"


def test_ops_node_list_fields_filters_and_pagination(small_fleet, ops_api):
    nodes = list(Node.objects.order_by("hostname"))
    place(nodes[0], "triage")
    body = ops_api.get("/api/v1/ops/nodes?page_size=3").json()
    assert len(body["results"]) == 3 and body["next_page_token"]
    row = body["results"][0]
    assert set(row) >= {
        "id",
        "hostname",
        "site",
        "hall",
        "rack",
        "node_type",
        "generation",
        "gpu_count",
        "fabric_domain",
        "lifecycle",
        "target_lifecycle",
        "power_state",
        "health",
        "cordoned",
        "cordon_reason",
        "conditions",
        "allocation_id",
        "drives",
    }
    seen = [r["id"] for r in body["results"]]
    token = body["next_page_token"]
    while token:
        page = ops_api.get(f"/api/v1/ops/nodes?page_size=3&page_token={token}").json()
        seen += [r["id"] for r in page["results"]]
        token = page["next_page_token"]
    assert sorted(seen) == sorted(str(n.pk) for n in nodes)
    triage = ops_api.get("/api/v1/ops/nodes?lifecycle=triage").json()["results"]
    assert [r["hostname"] for r in triage] == [nodes[0].hostname]
    assert ops_api.get("/api/v1/ops/nodes?cordoned=true").json()["results"] == []
    assert len(ops_api.get("/api/v1/ops/nodes?site=dc1&generation=hopper").json()["results"]) == len(nodes)
    bad = ops_api.get("/api/v1/ops/nodes?lifecycle=melted")
    assert bad.status_code == 400 and bad.json()["errors"][0]["field"] == "lifecycle"


def test_ops_node_list_query_count_is_fixed(small_fleet, ops_api, django_assert_max_num_queries):
    from devtools.services.fleet_seed import seed_fleet

    ops_api.get("/api/v1/ops/nodes")  # the token's first use writes last_used_at once
    with django_assert_max_num_queries(6) as small:
        assert len(ops_api.get("/api/v1/ops/nodes?page_size=4").json()["results"]) == 4
    seed_fleet(gpus=256, site_slug="dc2", seed=99)
    with django_assert_max_num_queries(6) as large:
        assert len(ops_api.get("/api/v1/ops/nodes?page_size=40").json()["results"]) == 40
    assert len(small) == len(large)


def test_ops_action_202_409_400_and_idempotency(node, ops_api):
    url = f"/api/v1/ops/nodes/{node.pk}/actions"
    missing = ops_api.post(url, {"action": "cordon", "reason": "x"}, format="json")
    assert missing.status_code == 400 and missing.json()["code"] == "idempotency_key_missing"
    ok = ops_api.post(url, {"action": "drain", "reason": "maintenance"}, format="json", HTTP_IDEMPOTENCY_KEY="k1")
    assert ok.status_code == 202 and ok.json()["cordoned"] is True and ok.json()["lifecycle"] == "available"
    again = ops_api.post(url, {"action": "drain", "reason": "maintenance"}, format="json", HTTP_IDEMPOTENCY_KEY="k1")
    assert again.status_code == 202 and again.headers["Idempotent-Replayed"] == "true"
    refused = ops_api.post(url, {"action": "repair"}, format="json", HTTP_IDEMPOTENCY_KEY="k2")
    assert refused.status_code == 409 and refused.json()["code"] == "invalid_transition"
    assert "repair is not allowed while" in refused.json()["detail"]
    unknown = ops_api.post(url, {"action": "explode"}, format="json", HTTP_IDEMPOTENCY_KEY="k3")
    assert unknown.status_code == 400 and unknown.json()["errors"][0]["field"] == "action"
    assert (
        ops_api.post(
            f"/api/v1/ops/nodes/{uuid.uuid4()}/actions", {"action": "cordon"}, format="json", HTTP_IDEMPOTENCY_KEY="k4"
        ).status_code
        == 404
    )
    assert ops_api.get("/api/v1/ops/nodes/not-a-uuid").status_code == 404


def test_action_refused_maps_to_its_code(node, ops_api, monkeypatch):
    from fleet.services import operator_actions

    class Blocked(operator_actions.OperatorAction):
        name, label, allowed_states = "blocked", "Blocked", frozenset({"available"})

        def execute(self, node, *, actor, reason):
            raise operator_actions.ActionRefused("sanitization_incomplete", "drives lack records", {"drives": ["d1"]})

    from core.services.permissions import OPS_ACTIONS, OpsAction

    monkeypatch.setitem(OPS_ACTIONS, "node.blocked", OpsAction("node.blocked", "fleet.change_node", "test action"))
    monkeypatch.setitem(operator_actions.REGISTRY, "blocked", Blocked())
    response = ops_api.post(
        f"/api/v1/ops/nodes/{node.pk}/actions", {"action": "blocked"}, format="json", HTTP_IDEMPOTENCY_KEY="k"
    )
    assert response.status_code == 409
    assert response.json()["code"] == "sanitization_incomplete" and response.json()["drives"] == ["d1"]


def test_ops_node_events(node, ops_api):
    ops_api.post(
        f"/api/v1/ops/nodes/{node.pk}/actions",
        {"action": "validate", "reason": "suspect"},
        format="json",
        HTTP_IDEMPOTENCY_KEY="k",
    )
    events = ops_api.get(f"/api/v1/ops/nodes/{node.pk}/events?page_size=1").json()
    assert events["results"] == [
        {
            "at": events["results"][0]["at"],
            "actor": "user:op",
            "action": "validate",
            "from_state": "available",
            "to_state": "validating",
            "reason": "suspect",
        }
    ]
    more = ops_api.get(f"/api/v1/ops/nodes/{node.pk}/events?page_token={events['next_page_token']}&page_size=1")
    assert more.json()["results"][0]["to_state"] == "available"


def test_ops_routes_refuse_agent_and_tenant_tokens(node):
    from core.services.tokens import create_api_token
    from tenants.models import Tenant

    tenant = Tenant.objects.create(slug="t1", name="T1")
    _, plain = create_api_token(kind="tenant", tenant=tenant, role="admin", actor="test")
    tenant_api = APIClient()
    tenant_api.credentials(HTTP_AUTHORIZATION=f"Bearer {plain}")
    for client in (tenant_api, _agent(node.pk)):
        assert client.get("/api/v1/ops/nodes").status_code == 403
        assert (
            client.post(
                f"/api/v1/ops/nodes/{node.pk}/actions", {"action": "cordon"}, format="json", HTTP_IDEMPOTENCY_KEY="k"
            ).status_code
            == 403
        )
