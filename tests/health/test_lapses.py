"""Correlated lapses and control-plane outages: one incident for one cause, nothing
quarantined for a silence the node did not cause.

The server's clock is moved by a fixture (every `timezone.now()` in the process, the live
server's thread included), so minutes of simulated silence take milliseconds.
"""

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from fleet.choices import AgentAction, Health, Lifecycle
from fleet.models import Node, NodeAgentAction
from health.choices import IncidentScope, IncidentState, IncidentStep
from health.models import Condition, Incident, IncidentEvent, LapseHold
from health.services.sweep import run_health_sweep


class Clock:
    def __init__(self):
        self.at = datetime.now(UTC).replace(microsecond=0)

    def now(self):
        return self.at

    def advance(self, seconds: float):
        self.at += timedelta(seconds=seconds)
        return self.at


@pytest.fixture
def clock(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(timezone, "now", clock.now)
    return clock


def _beat(agents, clock, seconds, *, sweep_every=30, step=10):
    """Let `seconds` pass: every agent beats every `step` s, the sweep runs every `sweep_every` s."""
    for tick in range(step, seconds + 1, step):
        clock.advance(step)
        for agent in agents:
            assert agent.heartbeat().status_code == 202
        if tick % sweep_every == 0:
            run_health_sweep(now=clock.now())


def _pulled():
    return (
        Node.objects.exclude(lifecycle=Lifecycle.AVAILABLE).count()
        + NodeAgentAction.objects.filter(action__in=(AgentAction.REBOOT, AgentAction.GPU_RESET)).count()
    )


@pytest.mark.django_db
def test_a_six_minute_control_plane_outage_quarantines_nothing(nodes, agent_for, clock):
    agents = [agent_for(n) for n in nodes]
    _beat(agents, clock, 60)
    # The control plane goes away for 6 minutes: no sweep runs, no heartbeat is received.
    clock.advance(360)
    summary = run_health_sweep(now=clock.now())
    assert summary["control_plane_outage_s"] >= 360 and summary["heartbeat_lost"] == 0
    incident = Incident.objects.get(scope=IncidentScope.CONTROL_PLANE)
    assert "no health sweep" in incident.title
    assert IncidentEvent.objects.filter(incident=incident, step=IncidentStep.PAGE).count() == 1
    # Agents resume; a full lease later everything is healthy, nothing pulled, the incident closed.
    _beat(agents, clock, 330)
    assert _pulled() == 0
    assert set(Node.objects.values_list("health", flat=True)) == {Health.HEALTHY}
    assert not Condition.objects.filter(signal="heartbeat_lost").exists()
    incident.refresh_from_db()
    assert incident.state == IncidentState.CLOSED
    assert Incident.objects.count() == 1


@pytest.mark.django_db
def test_a_node_silent_after_an_outage_is_still_judged_a_full_lease_after_the_restart(nodes, agent_for, clock):
    agents = [agent_for(n) for n in nodes]
    _beat(agents, clock, 30)
    clock.advance(360)
    run_health_sweep(now=clock.now())
    dead = nodes[0]
    _beat(agents[1:], clock, 270)  # inside the re-armed lease: held off
    assert Node.objects.get(pk=dead.pk).lifecycle == Lifecycle.AVAILABLE
    _beat(agents[1:], clock, 60)  # a full lease after the restart: it is a node fault now
    assert Node.objects.get(pk=dead.pk).lifecycle != Lifecycle.AVAILABLE
    assert Condition.objects.filter(node=dead, signal="heartbeat_lost").exists()
    assert Node.objects.exclude(pk=dead.pk).exclude(lifecycle=Lifecycle.AVAILABLE).count() == 0


@pytest.mark.django_db
def test_most_of_a_site_going_silent_is_one_incident_and_no_quarantine(
    nodes, agent_for, clock, ops_api, operator_client
):
    """The web tier (or the site network) loses the fleet while the sweep keeps running."""
    agents = [agent_for(n) for n in nodes]
    _beat(agents, clock, 60)
    _beat(agents[:2], clock, 600)  # 6 of 8 silent for 10 minutes
    incident = Incident.objects.get()
    assert incident.scope == IncidentScope.SITE and incident.state != IncidentState.CLOSED
    assert incident.nodes.count() == 6 and "6 of 8" in incident.title
    assert IncidentEvent.objects.filter(incident=incident, step=IncidentStep.PAGE).count() == 1
    assert _pulled() == 0
    assert Node.objects.filter(health=Health.UNKNOWN).count() == 6
    body = ops_api.get(f"/api/v1/ops/incidents/{incident.pk}").json()
    assert body["scope"] == "site" and "lost the fleet" in body["likely_cause"] and body["paged_at"]
    page = operator_client.get(f"/health/incidents/{incident.pk}/").content.decode()
    assert "likely cause: the site network or the control plane" in page
    _beat(agents, clock, 30)
    incident.refresh_from_db()
    assert incident.state == IncidentState.CLOSED
    assert incident.events.filter(step=IncidentStep.RETURN, detail__contains="6 node(s) reporting again").exists()
    assert not LapseHold.objects.filter(returned_at__isnull=True).exists()
    assert _pulled() == 0


@pytest.mark.django_db
def test_one_silent_node_is_still_its_own_fault(nodes, agent_for, clock):
    agents = [agent_for(n) for n in nodes]
    _beat(agents, clock, 30)
    _beat(agents[1:], clock, 330)
    assert not Incident.objects.exclude(scope=IncidentScope.NODE).exists()
    assert Node.objects.get(pk=nodes[0].pk).lifecycle != Lifecycle.AVAILABLE


@pytest.mark.django_db(transaction=True)
def test_the_simulator_killing_a_leaf_switch_opens_one_incident_and_rmas_nothing(live_server, clock):
    from devtools.services.fleet_seed import seed_fleet
    from devtools.simulator import FleetSimulator

    seed_fleet(gpus=64)
    # two leaves of four nodes each (the seeded pod puts 32 nodes on one leaf)
    hosts = list(Node.objects.order_by("hostname").values_list("hostname", flat=True))
    Node.objects.filter(hostname__in=hosts[4:]).update(leaf_switch="pod01-su02")
    simulator = FleetSimulator(url=live_server.url, speed=1.0, seed=11)
    assert simulator.refresh(clock.now()) == 8

    def run(seconds):
        for tick in range(5, seconds + 1, 5):
            simulator.step(clock.advance(5))
            if tick % 30 == 0:
                run_health_sweep(now=clock.now())

    run(60)
    leaf = next(name for name in simulator.leaf_of.values() if name.endswith("pod01-su02"))
    behind = simulator.fail_leaf(leaf)
    assert len(behind) == 4
    run(600)  # ten minutes dead: twice the per-node lease

    incident = Incident.objects.get()
    assert incident.scope == IncidentScope.LEAF and incident.state != IncidentState.CLOSED
    assert "pod01-su02" in incident.title and "leaf switch" in incident.likely_cause
    assert sorted(incident.nodes.values_list("hostname", flat=True)) == behind
    assert IncidentEvent.objects.filter(incident=incident, step=IncidentStep.PAGE).count() == 1
    held = Node.objects.filter(hostname__in=behind)
    assert set(held.values_list("lifecycle", flat=True)) == {Lifecycle.AVAILABLE}  # not quarantined, no RMA
    assert set(held.values_list("health", flat=True)) == {Health.UNKNOWN}
    assert not NodeAgentAction.objects.filter(action__in=(AgentAction.REBOOT, AgentAction.GPU_RESET)).exists()
    assert not Condition.objects.filter(signal="heartbeat_lost").exists()

    simulator.restore_leaf(leaf)
    run(60)
    incident.refresh_from_db()
    assert incident.state == IncidentState.CLOSED
    assert LapseHold.objects.filter(incident=incident, returned_at__isnull=False).count() == 4
    assert set(held.values_list("health", flat=True)) == {Health.HEALTHY}
    assert Incident.objects.count() == 1


@pytest.mark.django_db
def test_a_dark_two_node_rack_is_one_incident_with_both_nodes_held(nodes, agent_for, clock):
    """The demo's H100 racks hold 2 nodes: the threshold comes from the rack's size."""
    rack = nodes[0].rack_id
    pair = [n for n in nodes if n.rack_id == rack]
    assert len(pair) == 2
    agents = [agent_for(n) for n in nodes]
    _beat(agents, clock, 30)
    _beat([a for a in agents if a.node.rack_id != rack], clock, 900)  # 15 minutes dark
    incident = Incident.objects.get()
    assert incident.scope == IncidentScope.RACK and "2 of 2" in incident.title
    assert set(incident.nodes.values_list("pk", flat=True)) == {n.pk for n in pair}
    assert LapseHold.objects.filter(returned_at__isnull=True).count() == 2
    assert _pulled() == 0  # no drain, no reboot, no RMA
    assert not Condition.objects.filter(signal="heartbeat_lost").exists()


@pytest.mark.django_db
def test_a_node_alone_in_its_rack_says_the_rack_is_dark(nodes, agent_for, clock):
    from fleet.models import Rack

    home = nodes[0].rack
    spare = Rack.objects.create(
        hall=home.hall,
        name="solo-1",
        row=90,
        column=90,
        rated_power_kw=home.rated_power_kw,
        cooling=home.cooling,
        cooling_capacity_kw=home.cooling_capacity_kw,
    )
    Node.objects.filter(pk=nodes[0].pk).update(rack=spare)
    agents = [agent_for(n) for n in nodes]
    _beat(agents, clock, 30)
    _beat(agents[1:], clock, 330)
    condition = Condition.objects.get(node=nodes[0], signal="heartbeat_lost")
    assert f"rack {spare.name} is dark (its only node)" in condition.detail
