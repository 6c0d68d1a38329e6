"""Burn-in judged per intake: a node that failed burn-in at any time since it was enrolled is not
accepted on a later pass without an operator's decision, however far apart the runs."""

from datetime import timedelta

import pytest
from django.utils import timezone

from fleet.choices import Lifecycle
from fleet.models import Node, NodeEvent
from fleet.services.lifecycle import transition
from health.models import HealthCheckResult
from health.services.sweep import run_health_sweep

pytestmark = pytest.mark.django_db


def refresh(node):
    return Node.objects.get(pk=node.pk)


def _age_everything(node, days: float):
    """Move the node's history `days` into the past (the runs happened that long ago)."""
    for row in NodeEvent.objects.filter(node=node):
        NodeEvent.objects.filter(pk=row.pk).update(at=row.at - timedelta(days=days))
    HealthCheckResult.objects.filter(node=node).update(
        received_at=timezone.now() - timedelta(days=days), observed_at=timezone.now() - timedelta(days=days)
    )


def _fail_burn_in(node, agent):
    transition(refresh(node), Lifecycle.BURN_IN, actor="user:op", action="start_burn_in")
    agent.report(burn_in="fail")
    run_health_sweep()
    assert refresh(node).lifecycle == Lifecycle.BURN_IN_FAILED
    transition(refresh(node), Lifecycle.TRIAGE, actor="user:op", action="triage")
    transition(refresh(node), Lifecycle.REPAIR, actor="user:op", action="repair")


def test_failing_on_day_1_and_day_9_then_passing_on_day_10_waits_for_an_operator(nodes, agent_for):
    node, agent = nodes[0], agent_for(nodes[0])
    Node.objects.filter(pk=node.pk).update(lifecycle=Lifecycle.ENROLLED)
    NodeEvent.objects.create(
        node=node, at=timezone.now(), actor="user:op", action="enrol", from_state="", to_state=Lifecycle.ENROLLED
    )
    _age_everything(node, 1)
    _fail_burn_in(node, agent)  # day 1
    _age_everything(node, 8)  # day 1 is now 9 days ago
    _fail_burn_in(node, agent)  # day 9
    _age_everything(node, 1)
    transition(refresh(node), Lifecycle.BURN_IN, actor="user:op", action="start_burn_in")
    agent.report(dcgm_r3="pass", nccl_allreduce="pass", burn_in="pass")  # day 10
    run_health_sweep()
    node = refresh(node)
    assert node.lifecycle == Lifecycle.BURN_IN_FAILED and "operator decision" in node.last_error
    hold = NodeEvent.objects.get(node=node, action="health_flapping")
    assert "2 times since intake" in hold.reason and "burn_in" in hold.reason


def test_one_failure_since_intake_is_enough_and_a_clean_node_passes(nodes, agent_for):
    clean, failed = nodes[0], nodes[1]
    for node in (clean, failed):
        Node.objects.filter(pk=node.pk).update(lifecycle=Lifecycle.ENROLLED)
    _fail_burn_in(failed, agent_for(failed))
    for node in (clean, failed):
        transition(refresh(node), Lifecycle.BURN_IN, actor="user:op", action="start_burn_in")
        agent_for(node).report(dcgm_r3="pass", nccl_allreduce="pass", burn_in="pass")
    run_health_sweep()
    assert refresh(clean).lifecycle == Lifecycle.AVAILABLE
    assert refresh(failed).lifecycle == Lifecycle.BURN_IN_FAILED
    # the named person's decision is on the node's trail, and a pass after it is accepted
    transition(refresh(failed), Lifecycle.TRIAGE, actor="user:alice", action="triage", reason="PSU replaced")
    assert NodeEvent.objects.filter(node=failed, actor="user:alice", reason="PSU replaced").exists()
    transition(refresh(failed), Lifecycle.VALIDATING, actor="user:alice", action="validate")
    agent_for(failed).report(dcgm_r3="pass", nccl_allreduce="pass", ib_link="pass")
    run_health_sweep()
    assert refresh(failed).lifecycle == Lifecycle.AVAILABLE
