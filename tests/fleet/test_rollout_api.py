"""Rollouts through the operator API and the console: start, watch, pause, resume, cancel;
bounded input; cross-role refusals."""

import pytest
from django.contrib.auth.models import Group
from rest_framework.test import APIClient

from core.models import AuditEvent
from core.services.tokens import create_api_token
from fleet.models import Node, Rollout
from fleet.services.baselines import create_baseline
from fleet.services.rollouts import advance_rollouts

from .rollout_helpers import NEW, play_agents, report_old_stacks, run_gate

pytestmark = pytest.mark.django_db


@pytest.fixture
def nodes(small_fleet):
    nodes = list(Node.objects.select_related("node_type").order_by("hostname"))
    report_old_stacks(nodes)
    return nodes


@pytest.fixture
def baseline(nodes):
    return create_baseline(node_type=nodes[0].node_type, name="570", versions=NEW, actor="user:op")


def _start(ops_api, baseline, key="r1", **body):
    return ops_api.post(
        "/api/v1/ops/rollouts",
        {"baseline_id": str(baseline.pk), "canary_size": 1, "wave_size": 4, "max_domain_share": "0.5", **body},
        format="json",
        HTTP_IDEMPOTENCY_KEY=key,
    )


def test_start_watch_pause_resume_and_cancel(nodes, baseline, ops_api):
    created = _start(ops_api, baseline)
    assert created.status_code == 201, created.content
    body = created.json()
    assert body["counts"] == {"pending": len(nodes)} and len(body["nodes"]) == len(nodes)
    assert sorted({n["wave"] for n in body["nodes"]}) == [0, 1, 2]
    url = f"/api/v1/ops/rollouts/{body['id']}"
    advance_rollouts()
    assert ops_api.get(url).json()["counts"] == {"pending": len(nodes) - 1, "upgrading": 1}
    paused = ops_api.post(f"{url}/control", {"action": "pause", "reason": "change freeze"}, format="json")
    assert paused.status_code == 200 and paused.json()["state"] == "paused"
    assert ops_api.post(f"{url}/control", {"action": "pause"}, format="json").status_code == 409
    play_agents(nodes)
    run_gate()
    advance_rollouts()  # the canary in flight goes on; nothing new is taken
    advance_rollouts()
    play_agents(nodes)
    run_gate()
    advance_rollouts()
    detail = ops_api.get(url).json()
    assert detail["counts"] == {"done": 1, "pending": len(nodes) - 1}
    assert ops_api.post(f"{url}/control", {"action": "resume"}, format="json").json()["state"] == "running"
    cancelled = ops_api.post(f"{url}/control", {"action": "cancel", "reason": "enough"}, format="json")
    assert cancelled.json()["state"] == "cancelled"
    assert ops_api.get(url).json()["counts"] == {"done": 1, "skipped": len(nodes) - 1}
    assert [r["id"] for r in ops_api.get("/api/v1/ops/rollouts").json()] == [body["id"]]
    assert set(AuditEvent.objects.filter(object_id=body["id"]).values_list("action", flat=True)) >= {
        "rollout.create",
        "rollout.pause",
        "rollout.resume",
        "rollout.cancel",
        "rollout.node_upgrade",
        "rollout.node_done",
    }


BAD = {
    "canary too big": {"canary_size": 51},
    "wave zero": {"wave_size": 0},
    "share over half": {"max_domain_share": "0.9"},
    "negative floor": {"capacity_floor_gpus": -1},
    "huge drain": {"drain_minutes": 10**9},
    "forced without a reason": {"force": True},
    "too many nodes": {"node_ids": ["00000000-0000-0000-0000-000000000001"] * 5001},
    "unknown node": {"node_ids": ["00000000-0000-0000-0000-000000000001"]},
    "not a number": {"wave_size": "lots"},
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_rollouts_are_4xx_and_start_nothing(nodes, baseline, ops_api, case):
    response = _start(ops_api, baseline, key=f"bad-{case}", **BAD[case])
    assert response.status_code == 400, response.content
    assert response["Content-Type"].startswith("application/problem+json")
    assert not Rollout.objects.exists()


def test_a_second_rollout_over_the_same_nodes_is_409(nodes, baseline, ops_api):
    assert _start(ops_api, baseline).status_code == 201
    assert _start(ops_api, baseline, key="r2").status_code == 409


def test_read_only_and_unpermitted_staff_cannot_start_or_control(nodes, baseline, ops_api, django_user_model):
    rollout_id = _start(ops_api, baseline).json()["id"]
    for name, group in (("viewer", "read-only"), ("nobody", None)):
        user = django_user_model.objects.create_user(name, password="x-pass-123", is_staff=True)
        if group:
            user.groups.add(Group.objects.get(name=group))
        _, token = create_api_token(kind="operator", user=user, actor="test")
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
        assert _start(client, baseline, key=f"x-{name}").status_code == 403
        control = client.post(f"/api/v1/ops/rollouts/{rollout_id}/control", {"action": "cancel"}, format="json")
        assert control.status_code == 403
        assert client.get(f"/api/v1/ops/rollouts/{rollout_id}").status_code == 200
    assert Rollout.objects.get().state == "running" and Rollout.objects.count() == 1


def test_an_operator_starts_a_rollout_from_the_console_and_watches_its_waves(nodes, baseline, operator_client):
    page = operator_client.get("/fleet/rollouts/")
    assert page.status_code == 200 and "Start a rollout" in page.content.decode()
    response = operator_client.post(
        "/fleet/rollouts/",
        {"baseline_id": str(baseline.pk), "canary_size": "1", "wave_size": "4", "max_domain_share": "0.5"},
    )
    rollout = Rollout.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/fleet/rollouts/{rollout.pk}/"
    advance_rollouts()
    detail = operator_client.get(f"/fleet/rollouts/{rollout.pk}/").content.decode()
    assert 'id="wave-0"' in detail and 'id="wave-2"' in detail and "Upgrading" in detail
    refused = operator_client.post("/fleet/rollouts/", {"baseline_id": str(baseline.pk), "force": "true"})
    assert refused.status_code == 200 and "force_reason" in refused.content.decode()
    assert Rollout.objects.count() == 1
    operator_client.post(f"/fleet/rollouts/{rollout.pk}/", {"action": "pause", "reason": "look"})
    rollout.refresh_from_db()
    assert rollout.state == "paused"


@pytest.mark.parametrize("count", [1, 3])
def test_rollout_reads_have_a_fixed_query_count(nodes, baseline, django_assert_max_num_queries, count):
    from fleet.selectors import rollout_detail, rollouts_with_counts
    from fleet.services.rollouts import create_rollout

    for i in range(count):
        create_rollout(baseline=baseline, actor="user:op", node_ids=[nodes[i].pk], name=f"r{i}")
    with django_assert_max_num_queries(3):
        rollouts_with_counts()
    with django_assert_max_num_queries(3):
        rollout_detail(Rollout.objects.first().pk)
