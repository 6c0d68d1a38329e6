"""Correlated fabric failures: a leaf switch (or a fabric domain) that takes down the links of
many nodes at once is one incident naming the switch, and its nodes are not quarantined or sent
for cable repairs; a node that loses its link alone is still its own fault."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from fleet.choices import AgentAction, Lifecycle
from fleet.models import Node, NodeAgentAction
from health import policy
from health.choices import IncidentScope, IncidentState, IncidentStep
from health.models import FabricHold, Incident, IncidentEvent
from health.policy import fabric_thresholds
from health.services.sweep import run_health_sweep

from .conftest import heartbeat_body

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[2]

DOWN = [{"port": "mlx5_0/1", "state": "1: DOWN", "link_downed_1h": 1, "symbol_errors_1h": 0}]
UP = [{"port": "mlx5_0/1", "state": "4: ACTIVE", "link_downed_1h": 1, "symbol_errors_1h": 0}]


@pytest.fixture
def two_leaves(nodes):
    """The 8 nodes of the small fleet on two leaves of four (the seeded pod puts them on one)."""
    Node.objects.filter(pk__in=[n.pk for n in nodes[4:]]).update(leaf_switch="pod01-su02")
    return nodes[:4], nodes[4:]


def _beat(agents, server_clock, seconds, *, down=(), sweep_every=30, step=10):
    """`seconds` pass: every agent beats every `step` s (the `down` ones with their port down)."""
    down_ids = {a.node.pk for a in down}
    for tick in range(step, seconds + 1, step):
        server_clock.advance(step)
        for agent in agents:
            body = {**heartbeat_body(), "ib_ports": DOWN if agent.node.pk in down_ids else UP}
            assert agent.heartbeat(body=body).status_code == 202
        if tick % sweep_every == 0:
            run_health_sweep(now=server_clock.now())


def _pulled(nodes) -> int:
    ids = [n.pk for n in nodes]
    return Node.objects.filter(pk__in=ids).exclude(lifecycle=Lifecycle.AVAILABLE).count()


def test_a_dead_leaf_is_one_fabric_incident_and_quarantines_nothing(two_leaves, agent_for, server_clock, ops_api):
    first, second = two_leaves
    agents = [agent_for(n) for n in first + second]
    _beat(agents, server_clock, 30)
    behind = agents[4:]
    _beat(agents, server_clock, 600, down=behind)  # the leaf is down for ten minutes

    incident = Incident.objects.get()
    assert incident.scope == IncidentScope.FABRIC_LEAF and incident.state != IncidentState.CLOSED
    assert "pod01-su02" in incident.title and "4 of 4 nodes" in incident.title
    assert "leaf switch" in incident.likely_cause and "pod01-su02" in incident.likely_cause
    assert sorted(incident.nodes.values_list("pk", flat=True)) == sorted(n.pk for n in second)
    assert IncidentEvent.objects.filter(incident=incident, step=IncidentStep.PAGE).count() == 1
    assert _pulled(first + second) == 0  # no quarantine, no drain, no cable ticket
    assert FabricHold.objects.filter(incident=incident, returned_at__isnull=True).count() == 4
    assert ops_api.get(f"/api/v1/ops/incidents/{incident.pk}").json()["scope"] == "fabric_leaf"

    _beat(agents, server_clock, 60)  # the switch is back
    incident.refresh_from_db()
    assert incident.state == IncidentState.CLOSED
    assert incident.events.filter(
        step=IncidentStep.RETURN, detail__contains="4 node(s) have their fabric link"
    ).exists()
    assert _pulled(first + second) == 0 and Incident.objects.count() == 1


def test_a_node_that_loses_its_link_alone_is_still_a_cable_repair(two_leaves, agent_for, server_clock):
    first, second = two_leaves
    agents = [agent_for(n) for n in first + second]
    _beat(agents, server_clock, 30)
    _beat(agents, server_clock, 60, down=agents[4:6])  # 2 of 4 on the leaf: under the threshold
    assert not Incident.objects.filter(scope__in=(IncidentScope.FABRIC_LEAF, IncidentScope.FABRIC_DOMAIN)).exists()
    assert not FabricHold.objects.exists()
    assert set(Node.objects.filter(pk__in=[second[0].pk, second[1].pk]).values_list("lifecycle", flat=True)) == {
        Lifecycle.TRIAGE
    }
    assert not NodeAgentAction.objects.filter(action=AgentAction.REBOOT).exists()


def test_links_lost_across_a_fabric_domain_are_one_domain_incident(two_leaves, agent_for, server_clock):
    first, second = two_leaves
    agents = [agent_for(n) for n in first + second]
    _beat(agents, server_clock, 30)
    _beat(agents, server_clock, 60, down=agents[1:4] + agents[4:7])  # 6 of 8 across both leaves
    incident = Incident.objects.get()
    assert incident.scope == IncidentScope.FABRIC_DOMAIN and "6 of 8 nodes" in incident.title
    assert "spine" in incident.likely_cause
    assert _pulled(first + second) == 0


def test_a_node_still_down_after_its_leaf_came_back_is_judged_on_its_own(two_leaves, agent_for, server_clock):
    first, second = two_leaves
    agents = [agent_for(n) for n in first + second]
    _beat(agents, server_clock, 30)
    _beat(agents, server_clock, 60, down=agents[4:])
    assert FabricHold.objects.count() == 4 and _pulled(second) == 0
    _beat(agents, server_clock, 60, down=agents[7:])  # three links back, one still down
    straggler = Node.objects.get(pk=second[3].pk)
    assert FabricHold.objects.get(node=straggler).released_at is not None
    assert straggler.lifecycle == Lifecycle.TRIAGE  # its own cable now
    assert _pulled(second[:3]) == 0
    incident = Incident.objects.get(scope=IncidentScope.FABRIC_LEAF)
    assert incident.state == IncidentState.CLOSED
    assert incident.events.filter(detail__contains="judged on their own").exists()


def test_held_nodes_are_still_judged_on_their_other_signals(two_leaves, agent_for, server_clock):
    first, second = two_leaves
    agents = [agent_for(n) for n in first + second]
    _beat(agents, server_clock, 30)
    _beat(agents, server_clock, 30, down=agents[4:])
    assert FabricHold.objects.count() == 4
    faulty = agents[4]
    body = {**heartbeat_body(faults={0: {"xid_errors": [79]}}), "ib_ports": DOWN}
    assert faulty.heartbeat(body=body).status_code == 202
    run_health_sweep(now=server_clock.now())
    assert Node.objects.get(pk=faulty.node.pk).lifecycle != Lifecycle.AVAILABLE
    assert _pulled(second[1:]) == 0


def _page_queries(client, url) -> tuple[int, str]:
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url)
    assert response.status_code == 200
    return len(queries), response.content.decode()


def test_the_incident_page_and_the_admin_show_the_holds(two_leaves, agent_for, server_clock, operator_client):
    first, second = two_leaves
    agents = [agent_for(n) for n in first + second]
    _beat(agents, server_clock, 30)
    _beat(agents, server_clock, 60, down=agents[4:])
    incident = Incident.objects.get(scope=IncidentScope.FABRIC_LEAF)
    url = f"/health/incidents/{incident.pk}/"
    queries, page = _page_queries(operator_client, url)
    assert 'id="fabric-holds"' in page and "pod01-su02" in page
    for node in second:
        assert node.hostname in page
    assert page.count("<strong>held</strong>") == 4 and "ib_port_down" in page
    # more holds on the incident (ended ones) cost no query more
    now = server_clock.now()
    FabricHold.objects.bulk_create(
        [FabricHold(incident=incident, node=n, held_at=now, failing_since=now, returned_at=now) for n in first]
    )
    more, page = _page_queries(operator_client, url)
    assert more == queries and first[0].hostname in page and "link back" in page

    listing = operator_client.get("/admin/health/fabrichold/")
    assert listing.status_code == 200 and second[0].hostname in listing.content.decode()
    assert operator_client.get("/admin/health/fabrichold/", {"q": second[0].hostname}).status_code == 200
    assert operator_client.get("/admin/health/fabrichold/add/").status_code == 403  # the sweep writes them


@override_settings(HEALTH_FABRIC_LEAF_MIN_NODES=2)
def test_the_leaf_threshold_is_a_setting(two_leaves, agent_for, server_clock):
    first, second = two_leaves
    agents = [agent_for(n) for n in first + second]
    _beat(agents, server_clock, 30)
    _beat(agents, server_clock, 60, down=agents[4:6])  # 2 of 4: a cable pair by default, a leaf here
    incident = Incident.objects.get(scope=IncidentScope.FABRIC_LEAF)
    assert "2 of 4 nodes" in incident.title
    assert FabricHold.objects.filter(incident=incident).count() == 2
    assert _pulled(first + second) == 0


def test_the_defaults_are_the_policy_constants():
    rules = fabric_thresholds()
    assert rules.leaf_min_nodes == policy.FABRIC_LEAF_MIN_NODES and rules.leaf_share == policy.FABRIC_LEAF_SHARE
    assert rules.domain_min_nodes == policy.FABRIC_DOMAIN_MIN_NODES
    assert rules.domain_share == policy.FABRIC_DOMAIN_SHARE and rules.window == policy.FABRIC_WINDOW


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("HEALTH_FABRIC_LEAF_MIN_NODES", "1"),
        ("HEALTH_FABRIC_LEAF_MIN_NODES", "three"),
        ("HEALTH_FABRIC_DOMAIN_SHARE", "1.5"),
        ("HEALTH_FABRIC_LEAF_SHARE", "nan"),
        ("HEALTH_FABRIC_WINDOW_S", "-30"),
    ],
)
@pytest.mark.slow  # subprocess
def test_a_nonsense_threshold_refuses_to_start(tmp_path, variable, value):
    env = {**os.environ, "DEBUG": "true", "HANGAR_VAR_DIR": str(tmp_path), variable: value}
    env["DJANGO_SETTINGS_MODULE"] = "config.settings"
    done = subprocess.run(
        [sys.executable, "-c", "from django.conf import settings; settings.DEBUG"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert "ImproperlyConfigured" in done.stderr and f"{variable}={value!r} must be" in done.stderr
