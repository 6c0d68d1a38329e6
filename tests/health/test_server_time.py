"""Server time decides: an agent's clock can neither pass a node through validation nor
hide how far off it is."""

from datetime import timedelta

import pytest
from django.utils import timezone

from fleet.choices import Lifecycle
from fleet.models import Node
from health.models import Condition, HealthCheckResult
from health.services.sweep import run_health_sweep

pytestmark = pytest.mark.django_db


def _stamp(delta: timedelta) -> str:
    return (timezone.now() + delta).isoformat().replace("+00:00", "Z")


def _report(agent, delta=timedelta(0), **checks):
    body = {
        "observed_at": _stamp(delta),
        "checks": [{"name": name, "status": status, "detail": ""} for name, status in checks.items()],
    }
    return agent.client.post("/api/agent/v1/health-reports", body, format="json")


def _validate(ops_api, node, key="v1"):
    response = ops_api.post(
        f"/api/v1/ops/nodes/{node.pk}/actions",
        {"action": "validate", "reason": "suspect"},
        format="json",
        HTTP_IDEMPOTENCY_KEY=key,
    )
    assert response.status_code == 202, response.content
    return response


PASSING = {"dcgm_r3": "pass", "nccl_allreduce": "pass", "ib_link": "pass"}


def test_future_dated_passes_posted_before_validate_never_open_the_gate(nodes, agent_for, ops_api):
    node, agent = nodes[0], agent_for(nodes[0])
    forged = _report(agent, timedelta(minutes=10), **PASSING)
    assert forged.status_code == 422
    assert forged["Content-Type"].startswith("application/problem+json")
    assert forged.json()["code"] == "clock_skew" and "allowed ±300 s" in forged.json()["detail"]
    # kept for inspection, marked, never counted
    kept = HealthCheckResult.objects.filter(node=node)
    assert kept.count() == 3 and set(kept.values_list("refused", flat=True)) == {"clock_skew"}
    assert 580 <= Node.objects.get(pk=node.pk).agent_clock_skew_s <= 600
    # An in-window pass posted before the operator's validate does not count either.
    assert _report(agent, timedelta(seconds=30), **PASSING).status_code == 202
    _validate(ops_api, node)
    run_health_sweep()
    run_health_sweep()
    assert Node.objects.get(pk=node.pk).lifecycle == Lifecycle.VALIDATING
    # The checks really run (received after the request): the node passes.
    assert _report(agent, **PASSING).status_code == 202
    run_health_sweep()
    assert Node.objects.get(pk=node.pk).lifecycle == Lifecycle.AVAILABLE


def test_a_past_dated_report_is_refused_too(nodes, agent_for):
    response = _report(agent_for(nodes[1]), -timedelta(minutes=6), dcgm_r2="fail")
    assert response.status_code == 422 and response.json()["code"] == "clock_skew"
    assert not Condition.objects.filter(node=nodes[1]).exists()  # the failure it claims raised nothing


def test_each_agents_skew_is_on_its_node_page_and_in_metrics(nodes, agent_for, operator_client, ops_api):
    from tests.health.conftest import heartbeat_body

    agent = agent_for(nodes[2])
    body = heartbeat_body()
    body["observed_at"] = _stamp(timedelta(seconds=-42))
    assert agent.heartbeat(body=body).status_code == 202  # heartbeats use server time: accepted, skew measured
    node = Node.objects.get(pk=nodes[2].pk)
    skew = node.agent_clock_skew_s
    assert -62 <= skew <= -42 and node.last_heartbeat_at is not None
    page = operator_client.get(f"/fleet/nodes/{node.pk}/")
    assert f"{skew} s against the server" in page.content.decode()
    metrics = ops_api.get("/metrics").content.decode()
    assert f'hangar_agent_clock_skew_seconds{{node="{node.hostname}"}} {skew}.0' in metrics
    assert f"hangar_agent_clock_skew_max_abs_seconds {-skew}.0" in metrics
