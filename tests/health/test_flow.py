"""The health chain end to end, driven by agent payloads through the real endpoints."""

from datetime import timedelta

import pytest
from django.utils import timezone

from fleet.choices import AgentAction, AgentActionState, Health, Lifecycle
from fleet.models import Node, NodeAgentAction
from health.choices import ConditionStatus, IncidentState
from health.models import (
    Condition,
    ConditionEvent,
    HealthCheckResult,
    Incident,
    IncidentEvent,
)
from health.services.sweep import run_health_sweep

pytestmark = pytest.mark.django_db


def refresh(node):
    node.refresh_from_db()
    return node


def finish_action(node, action, state=AgentActionState.SUCCEEDED):
    assert (
        NodeAgentAction.objects.filter(node=node, action=action, state=AgentActionState.PENDING).update(
            state=state, finished_at=timezone.now()
        )
        == 1
    )


def pass_gate(agent, first_check):
    others = {"nccl_allreduce": "pass", "ib_link": "pass"}
    return agent.report(**{first_check: "pass"}, **others)


def test_heartbeat_updates_node_and_records_power(nodes, agent_for):
    agent = agent_for(nodes[0])
    assert agent.heartbeat().status_code == 202
    node = refresh(nodes[0])
    assert node.last_heartbeat_at is not None and node.power_state == "on"
    assert node.gpu_power_w == 8 * 400
    assert not Condition.objects.exists()


@pytest.mark.parametrize(
    "body",
    [
        [],
        "x",
        {"gpus": "nope"},
        {"gpus": [{"index": -1}]},
        {"gpus": [{"index": 0, "xid_errors": ["79"]}]},
        {"observed_at": "yesterday", "gpus": []},
        {"power_state": "sideways", "gpus": []},
        {"gpus": [{"index": 0}, {"index": 0}]},
        {"gpus": [{"index": 0, "temperature_c": "hot"}]},
    ],
)
def test_bad_heartbeats_are_400_problems(nodes, agent_for, body):
    response = agent_for(nodes[0]).heartbeat(body=body)
    assert response.status_code == 400
    assert response["Content-Type"].startswith("application/problem+json")
    assert response.json()["code"] == "validation_error"


def test_bad_health_reports_are_400(nodes, agent_for):
    agent = agent_for(nodes[0])
    for body in (
        {},
        {"checks": []},
        {"checks": [{"name": "dcgm_r9", "status": "pass"}]},
        {"checks": [{"name": "dcgm_r2", "status": "ok"}]},
    ):
        response = agent.client.post("/api/agent/v1/health-reports", body, format="json")
        assert response.status_code == 400, body
        assert response.json()["code"] == "validation_error"


def test_agent_endpoints_need_an_agent_token(nodes, ops_api):
    assert ops_api.post("/api/agent/v1/heartbeat", {"gpus": []}, format="json").status_code in (401, 403)


def test_info_signal_is_recorded_only(nodes, agent_for):
    agent = agent_for(nodes[0])
    agent.heartbeat(faults={2: {"xid_errors": [13], "ecc_sbe": 3}})
    run_health_sweep()
    node = refresh(nodes[0])
    assert node.lifecycle == Lifecycle.AVAILABLE and node.health == Health.HEALTHY
    assert set(Condition.objects.values_list("signal", flat=True)) == {"xid_13", "ecc_sbe"}


def test_warn_signal_degrades_without_pulling(nodes, agent_for):
    agent = agent_for(nodes[0])
    agent.heartbeat(faults={1: {"temperature_c": 91}})
    run_health_sweep()
    assert refresh(nodes[0]).health == Health.HEALTHY  # one hot sample is a slowdown, not yet a fault
    # test setup: the slowdown has lasted the whole thermal window
    Condition.objects.filter(signal="thermal_slowdown").update(first_seen=timezone.now() - timedelta(minutes=11))
    agent.heartbeat(faults={1: {"temperature_c": 91}})
    run_health_sweep()
    node = refresh(nodes[0])
    assert node.health == Health.DEGRADED and node.lifecycle == Lifecycle.AVAILABLE
    agent.heartbeat()  # level signal: cleared when the heartbeat no longer reports it
    run_health_sweep()
    assert refresh(nodes[0]).health == Health.HEALTHY
    assert Condition.objects.get(signal="thermal_throttle").status == ConditionStatus.CLEARED


def test_reset_class_chain_returns_only_through_the_gate(nodes, agent_for):
    node, agent = nodes[0], agent_for(nodes[0])
    agent.heartbeat(faults={3: {"xid_errors": [62]}})
    run_health_sweep()
    node = refresh(node)
    # No allocation: quarantine → drain → remediation in one sweep, with a GPU reset queued.
    assert node.lifecycle == Lifecycle.REMEDIATING and node.cordoned and node.attribution == "provider"
    assert node.health == Health.UNHEALTHY
    finish_action(node, AgentAction.GPU_RESET)
    run_health_sweep()
    node = refresh(node)
    assert node.lifecycle == Lifecycle.VALIDATING
    assert NodeAgentAction.objects.filter(node=node, action="dcgm_r2", state="pending").exists()
    agent.report(dcgm_r2="pass", nccl_allreduce="pass")  # ib_link missing: not yet
    run_health_sweep()
    assert refresh(node).lifecycle == Lifecycle.VALIDATING
    agent.report(ib_link="pass")
    run_health_sweep()
    node = refresh(node)
    assert node.lifecycle == Lifecycle.AVAILABLE and not node.cordoned and node.attribution == ""
    assert not Condition.objects.filter(node=node, status=ConditionStatus.ACTIVE).exists()
    incident = Incident.objects.get()
    assert incident.state == IncidentState.REPAIRED
    assert [e.step for e in incident.events.all()][:2] == ["detect", "stabilise"]
    assert "return" in {e.step for e in incident.events.all()}


def test_reboot_class_uses_power_cycle_and_r3(nodes, agent_for):
    node, agent = nodes[0], agent_for(nodes[0])
    agent.heartbeat(faults={0: {"nvlink_down": 2}})
    run_health_sweep()
    finish_action(node, AgentAction.REBOOT)
    run_health_sweep()
    assert refresh(node).lifecycle == Lifecycle.VALIDATING
    pass_gate(agent, "dcgm_r2")  # the wrong DCGM level does not satisfy the gate after a reboot
    run_health_sweep()
    assert refresh(node).lifecycle == Lifecycle.VALIDATING
    agent.heartbeat()
    pass_gate(agent, "dcgm_r3")
    run_health_sweep()
    assert refresh(node).lifecycle == Lifecycle.AVAILABLE


def test_gpu_count_mismatch_is_reboot_class(nodes, agent_for):
    agent_for(nodes[0]).heartbeat(gpus=7)
    run_health_sweep()
    assert Condition.objects.get().signal == "gpu_count_mismatch"
    assert refresh(nodes[0]).lifecycle == Lifecycle.REMEDIATING
    assert NodeAgentAction.objects.filter(node=nodes[0], action="reboot").exists()


# Xid 64 and Xid 48 with 63/64 reset the GPU (NVIDIA's catalogue: RESET_GPU, DRAIN_AND_RESET):
# tests/health/test_xid_catalog.py. A failed row remap is still fatal.
@pytest.mark.parametrize("faults", [{5: {"row_remap_failed": 1}}])
def test_fatal_goes_to_triage(nodes, agent_for, faults):
    agent = agent_for(nodes[0])
    agent.heartbeat(faults=faults)
    run_health_sweep()
    node = refresh(nodes[0])
    assert node.lifecycle == Lifecycle.TRIAGE and node.cordoned
    assert Incident.objects.get().state == IncidentState.DIAGNOSED


def test_validation_fail_goes_to_triage_and_r3_fail_is_fatal(nodes, agent_for):
    node, agent = nodes[0], agent_for(nodes[0])
    agent.heartbeat(faults={0: {"xid_errors": [79]}})
    run_health_sweep()
    finish_action(node, AgentAction.REBOOT)
    run_health_sweep()
    agent.report(dcgm_r3="fail", nccl_allreduce="pass", ib_link="pass")
    run_health_sweep()
    assert refresh(node).lifecycle == Lifecycle.TRIAGE


def test_same_fault_twice_in_7_days_is_fatal(nodes, agent_for):
    node, agent = nodes[0], agent_for(nodes[0])
    ConditionEvent.objects.create(
        node=node, gpu_index=4, signal="xid_79", severity="reboot", kind="raised", at=timezone.now() - timedelta(days=3)
    )
    agent.heartbeat(faults={4: {"xid_errors": [79]}})
    run_health_sweep()
    assert refresh(node).lifecycle == Lifecycle.TRIAGE


def _fail_validation(node, agent):
    agent.heartbeat(faults={0: {"xid_errors": [62]}})
    run_health_sweep()
    finish_action(node, AgentAction.GPU_RESET)
    run_health_sweep()
    agent.report(dcgm_r2="fail")
    run_health_sweep()
    assert refresh(node).lifecycle == Lifecycle.TRIAGE


def test_flapping_node_is_not_accepted_on_the_third_pass(nodes, agent_for):
    from fleet.models import NodeEvent
    from fleet.services.lifecycle import transition

    node, agent = nodes[0], agent_for(nodes[0])
    _fail_validation(node, agent)  # first failure
    transition(refresh(node), Lifecycle.VALIDATING, actor="test", action="revalidate")
    agent.report(dcgm_r3="fail")  # second failure within 7 days (re-validation after triage runs r3)
    run_health_sweep()
    assert refresh(node).lifecycle == Lifecycle.TRIAGE
    transition(refresh(node), Lifecycle.VALIDATING, actor="test", action="revalidate")
    agent.report(dcgm_r3="pass", nccl_allreduce="pass", ib_link="pass")
    run_health_sweep()
    node = refresh(node)
    # Passing checks are refused on the third pass; that third triage in 30 days means RMA, which
    # waits at the drive gate: the agent never reported the drives, none has a record.
    assert NodeEvent.objects.filter(node=node, action="health_flapping", to_state=Lifecycle.TRIAGE).exists()
    assert node.lifecycle == Lifecycle.TRIAGE and "rma held by the drive gate" in node.last_error


def test_the_automatic_rma_goes_once_the_drive_gate_is_met(nodes, agent_for):
    from fleet.models import NodeEvent
    from fleet.services.lifecycle import transition
    from tests.fleet.lifecycle_helpers import pass_drive_gate

    node, agent = nodes[0], agent_for(nodes[0])
    _fail_validation(node, agent)
    transition(refresh(node), Lifecycle.VALIDATING, actor="test", action="revalidate")
    agent.report(dcgm_r3="fail")
    run_health_sweep()
    pass_drive_gate(refresh(node))  # the agent reports its drives; each has a verified purge record
    transition(refresh(node), Lifecycle.VALIDATING, actor="test", action="revalidate")
    agent.report(dcgm_r3="fail")
    run_health_sweep()
    assert refresh(node).lifecycle == Lifecycle.RMA
    assert NodeEvent.objects.filter(node=node, action="health_rma").exists()


def test_heartbeat_lease(nodes, agent_for):
    node, agent = nodes[0], agent_for(nodes[0])
    agent.heartbeat()
    now = timezone.now()
    run_health_sweep(now=now + timedelta(seconds=10))
    assert refresh(node).health == Health.HEALTHY
    run_health_sweep(now=now + timedelta(seconds=45))
    node = refresh(node)
    assert node.health == Health.UNKNOWN and node.lifecycle == Lifecycle.AVAILABLE
    for seconds in range(75, 300, 30):  # the sweep keeps running (a gap would be an outage: see test_lapses)
        run_health_sweep(now=now + timedelta(seconds=seconds))
        assert refresh(node).lifecycle == Lifecycle.AVAILABLE
    run_health_sweep(now=now + timedelta(seconds=301))
    node = refresh(node)
    assert node.lifecycle == Lifecycle.REMEDIATING
    assert Condition.objects.get(node=node).signal == "heartbeat_lost"
    # Nodes that never reported stay unknown and are left alone.
    assert refresh(nodes[1]).lifecycle == Lifecycle.AVAILABLE


def test_sweeps_are_idempotent(nodes, agent_for):
    agent_for(nodes[0]).heartbeat(faults={0: {"xid_errors": [79]}})
    agent_for(nodes[1]).heartbeat(faults={0: {"xid_errors": [64]}})
    run_health_sweep()
    counts = (
        Incident.objects.count(),
        IncidentEvent.objects.count(),
        NodeAgentAction.objects.count(),
        ConditionEvent.objects.count(),
        list(Node.objects.values_list("lifecycle", flat=True)),
    )
    run_health_sweep()
    run_health_sweep()
    assert counts == (
        Incident.objects.count(),
        IncidentEvent.objects.count(),
        NodeAgentAction.objects.count(),
        ConditionEvent.objects.count(),
        list(Node.objects.values_list("lifecycle", flat=True)),
    )
    assert Incident.objects.count() == 2


def test_health_report_stores_results_and_raises_conditions(nodes, agent_for):
    agent = agent_for(nodes[0])
    agent.heartbeat()
    assert agent.report(ib_link="warn", nvme_smart="fail").status_code == 202
    assert HealthCheckResult.objects.count() == 2
    run_health_sweep()
    assert refresh(nodes[0]).health == Health.DEGRADED
    agent.report(ib_link="pass", nvme_smart="pass")
    run_health_sweep()
    assert refresh(nodes[0]).health == Health.HEALTHY


def test_roll_up_sets_each_health_in_one_sweep_with_a_fixed_query_count(nodes, agent_for):
    """One sweep sorts fresh nodes into unhealthy / degraded / healthy and stale ones into
    unknown (unhealthy: test_flow's pull tests); the query count does not depend on how many
    nodes there are."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    for node in nodes[:4]:
        agent_for(node).heartbeat()
    agent_for(nodes[1]).report(ib_link="warn")
    Node.objects.filter(pk=nodes[2].pk).update(last_heartbeat_at=timezone.now() - timedelta(hours=1))
    with CaptureQueriesContext(connection) as small:
        run_health_sweep()
    assert [refresh(n).health for n in nodes[1:4]] == [Health.DEGRADED, Health.UNKNOWN, Health.HEALTHY]
    for node in nodes[4:]:
        agent_for(node).heartbeat()
    agent_for(nodes[5]).report(ib_link="warn")
    with CaptureQueriesContext(connection) as large:
        run_health_sweep()
    assert refresh(nodes[5]).health == Health.DEGRADED and refresh(nodes[6]).health == Health.HEALTHY
    assert len(large.captured_queries) == len(small.captured_queries)


@pytest.mark.parametrize("fault", [{"index": 70_000}, {"power_w": 1e300}, {"temperature_c": -1e12}])
def test_out_of_range_telemetry_is_a_clear_400(nodes, agent_for, fault):
    from tests.health.conftest import gpu

    body = {"observed_at": "2026-11-29T20:00:00Z", "power_state": "on", "gpus": [{**gpu(0), **fault}]}
    response = agent_for(nodes[0]).heartbeat(body=body)
    assert response.status_code == 400 and response.json()["code"] == "validation_error"


def test_nul_characters_are_refused_before_they_reach_the_database(nodes, agent_for):
    response = agent_for(nodes[0]).client.post(
        "/api/agent/v1/health-reports",
        {"observed_at": "2026-11-29T20:00:00Z", "checks": [{"name": "ib_link", "status": "pass", "detail": "a\x00b"}]},
        format="json",
    )
    assert response.status_code == 400 and "NUL" in response.json()["detail"]
