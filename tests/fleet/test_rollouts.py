"""Rolling upgrades: waves with a canary, never under the capacity floor, paused by a failing
canary, resumed after a killed worker without redoing a node."""

import pytest

from core.models import AuditEvent
from fleet.models import Node, NodeAgentAction, NodeEvent, Rollout
from fleet.services.baselines import create_baseline
from fleet.services.rollouts import advance_rollouts, create_rollout, plan_waves, rollouts_pass

from .lifecycle_helpers import allocate
from .rollout_helpers import NEW, free_nodes, play_agents, report_old_stacks, run_gate

pytestmark = pytest.mark.django_db


@pytest.fixture
def nodes(small_fleet):
    nodes = list(Node.objects.select_related("node_type").order_by("hostname"))
    report_old_stacks(nodes)
    return nodes


@pytest.fixture
def baseline(nodes):
    return create_baseline(node_type=nodes[0].node_type, name="570", versions=NEW, actor="user:op")


def _cycle(nodes, **kwargs):
    """One round: the loop acts, the agents do their work, the gate judges."""
    advance_rollouts()
    play_agents(nodes, **kwargs)
    run_gate()


def test_a_rollout_completes_in_waves_and_never_takes_capacity_under_the_floor(nodes, baseline):
    gpus = nodes[0].node_type.gpus_per_node
    floor = (len(nodes) - 2) * gpus  # at most two nodes out at once
    rollout = create_rollout(
        baseline=baseline, actor="user:op", canary_size=1, wave_size=4, max_domain_share=0.5, capacity_floor_gpus=floor
    )
    assert sorted(rollout.nodes.values_list("wave", flat=True)) == [0, 1, 1, 1, 1, 2, 2, 2]
    lowest = free_nodes(nodes[0].node_type)
    for _ in range(20):
        advance_rollouts()
        lowest = min(lowest, free_nodes(nodes[0].node_type))
        play_agents(nodes)
        run_gate()
        rollout.refresh_from_db()
        if rollout.state == "completed":
            break
    assert rollout.state == "completed"
    assert lowest * gpus >= floor
    assert set(rollout.nodes.values_list("state", flat=True)) == {"done"}
    assert not Node.objects.filter(cordoned=True).exists()
    assert NodeAgentAction.objects.filter(action="upgrade").count() == len(nodes)  # each node once
    assert AuditEvent.objects.filter(action="rollout.complete", object_id=str(rollout.pk)).exists()
    assert NodeEvent.objects.filter(node=nodes[0], action="rollout.done").exists()


def test_a_failing_canary_pauses_the_rollout_and_nothing_else_is_taken(nodes, baseline):
    rollout = create_rollout(baseline=baseline, actor="user:op", canary_size=1, wave_size=4, max_domain_share=0.5)
    canary = rollout.nodes.get(wave=0).node
    for _ in range(3):
        _cycle(nodes, fail_upgrade={canary.hostname})
    rollout.refresh_from_db()
    assert rollout.state == "paused"
    assert rollout.paused_reason.startswith(f"canary {canary.hostname} failed: upgrade failed")
    assert NodeAgentAction.objects.filter(action="upgrade").count() == 1
    assert set(rollout.nodes.exclude(wave=0).values_list("state", flat=True)) == {"pending"}
    canary.refresh_from_db()
    assert canary.cordoned and "failed" in canary.cordon_reason  # held for an operator


def test_a_worker_killed_mid_pass_resumes_without_redoing_a_node(nodes, baseline):
    rollout = create_rollout(baseline=baseline, actor="user:op", canary_size=1, wave_size=4, max_domain_share=0.5)
    for _ in range(3):  # the canary is done; wave 1 is in flight
        _cycle(nodes)
    upgrading = list(rollout.nodes.filter(state="upgrading"))
    assert len(upgrading) == 4
    play_agents(nodes)

    class Killed(Exception):
        pass

    seen = []

    def kill_after_two(entry):
        seen.append(entry.node_id)
        if len(seen) == 2:
            raise Killed

    with pytest.raises(Killed):
        rollouts_pass(after_node=kill_after_two)
    states = dict(rollout.nodes.filter(wave=1).values_list("node_id", "state"))
    assert sorted(states.values()) == ["upgrading", "upgrading", "validating", "validating"]
    for _ in range(10):
        _cycle(nodes)
        rollout.refresh_from_db()
        if rollout.state == "completed":
            break
    assert rollout.state == "completed"
    for node in nodes:  # nobody upgraded or validated twice
        assert NodeAgentAction.objects.filter(node=node, action="upgrade").count() == 1
        assert NodeEvent.objects.filter(node=node, action="rollout.validate").count() == 1


def test_a_busy_node_is_never_evicted_unless_forced(nodes, baseline):
    allocate(nodes[0])
    Node.objects.filter(pk=nodes[0].pk).update(lifecycle="active")
    rollout = create_rollout(baseline=baseline, actor="user:op", node_ids=[nodes[0].pk], canary_size=1, drain_minutes=1)
    advance_rollouts()
    entry = rollout.nodes.get()
    assert entry.state == "waiting_free"
    from datetime import timedelta

    from django.utils import timezone

    advance_rollouts(now=timezone.now() + timedelta(minutes=2))
    entry.refresh_from_db()
    node = Node.objects.get(pk=nodes[0].pk)
    assert entry.state == "skipped" and node.lifecycle == "active" and node.drain_deadline is None
    assert not NodeAgentAction.objects.filter(action="upgrade").exists()


def test_a_forced_rollout_needs_a_reason_and_then_drains_at_the_deadline(nodes, baseline):
    from core.errors import Invalid

    with pytest.raises(Invalid):
        create_rollout(baseline=baseline, actor="user:op", node_ids=[nodes[0].pk], force=True)
    allocate(nodes[0])
    Node.objects.filter(pk=nodes[0].pk).update(lifecycle="active")
    create_rollout(
        baseline=baseline,
        actor="user:op",
        node_ids=[nodes[0].pk],
        drain_minutes=1,
        force=True,
        force_reason="CVE-2026-0001 driver fix",
    )
    from datetime import timedelta

    from django.utils import timezone

    advance_rollouts()
    advance_rollouts(now=timezone.now() + timedelta(minutes=2))
    node = Node.objects.get(pk=nodes[0].pk)
    assert node.drain_deadline is not None  # the allocation loop moves the tenant off
    assert NodeEvent.objects.filter(node=node, action="rollout.evict", reason__contains="CVE-2026-0001").exists()


def test_waves_take_at_most_a_share_of_each_fabric_domain():
    class N:
        def __init__(self, i, domain):
            self.pk, self.hostname, self.fabric_domain_id = i, f"h{i:03}", domain

    nodes = [N(i, "a" if i < 12 else "b") for i in range(16)]
    waves = plan_waves(nodes, canary_size=2, wave_size=10, share=0.25, domain_sizes={"a": 12, "b": 4})
    per_wave_domain = {}
    for n in nodes:
        key = (waves[n.pk], n.fabric_domain_id)
        per_wave_domain[key] = per_wave_domain.get(key, 0) + 1
    assert all(count <= (3 if d == "a" else 1) for (w, d), count in per_wave_domain.items())
    assert sum(1 for n in nodes if waves[n.pk] == 0) == 2
    assert Rollout  # imported for the schema; the model is exercised above


def test_an_operators_cordon_survives_the_rollout(nodes, baseline):
    Node.objects.filter(pk=nodes[0].pk).update(cordoned=True, cordon_reason="fan noise, ticket 42")
    rollout = create_rollout(baseline=baseline, actor="user:op", node_ids=[nodes[0].pk])
    for _ in range(4):
        _cycle(nodes)
    rollout.refresh_from_db()
    node = Node.objects.get(pk=nodes[0].pk)
    assert rollout.state == "completed"
    assert (node.cordoned, node.cordon_reason) == (True, "fan noise, ticket 42")
