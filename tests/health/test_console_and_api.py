"""Console pages, the ops incident API, selectors and charts; fixed query counts at two sizes."""

import pytest
from django.utils import timezone

from fleet.choices import Lifecycle
from fleet.models import Node
from health import charts, selectors
from health.models import Incident
from health.services.sweep import run_health_sweep

pytestmark = pytest.mark.django_db


def _pull(nodes, agent_for, count):
    for node in nodes[:count]:
        agent_for(node).heartbeat(faults={0: {"xid_errors": [79]}})
    run_health_sweep()


def test_policy_page_lists_every_severity(operator_client, db):
    body = operator_client.get("/health/policy/").content.decode()
    for text in (
        "xid_79",
        "xid_64",
        "row_remap_failed",
        "heartbeat_lost",
        "thermal_throttle",
        "gpu_count_mismatch",
        "ib_link",
        "nvme_smart",
        "Kubernetes node lifecycle defaults",
    ):
        assert text in body


def test_dashboard_and_incident_page(operator_client, nodes, agent_for, django_assert_max_num_queries):
    _pull(nodes, agent_for, 1)
    with django_assert_max_num_queries(20):
        response = operator_client.get("/health/")
    assert response.status_code == 200 and "dc1-gpu00001" in response.content.decode()
    incident = Incident.objects.get()
    page = operator_client.get(f"/health/incidents/{incident.pk}/").content.decode()
    assert "Detect" in page and "Stabilise" in page
    assert operator_client.get("/health/incidents/not-a-uuid/").status_code == 404


def test_incident_closes_only_after_the_gate(operator_client, nodes, agent_for):
    from fleet.choices import AgentAction, AgentActionState
    from fleet.models import NodeAgentAction

    node, agent = nodes[0], agent_for(nodes[0])
    _pull(nodes, agent_for, 1)
    incident = Incident.objects.get()
    url = f"/health/incidents/{incident.pk}/"
    response = operator_client.post(url, {"cause": "GPU fell off the bus", "attribution": "provider", "close": "on"})
    assert "passed validation" in response.content.decode()
    incident.refresh_from_db()
    assert incident.state != "closed"
    NodeAgentAction.objects.filter(node=node, action=AgentAction.REBOOT).update(state=AgentActionState.SUCCEEDED)
    run_health_sweep()
    agent.report(dcgm_r3="pass", nccl_allreduce="pass", ib_link="pass")
    run_health_sweep()
    assert (
        operator_client.post(
            url, {"cause": "GPU fell off the bus", "attribution": "provider", "close": "on"}
        ).status_code
        == 302
    )
    incident.refresh_from_db()
    assert incident.state == "closed" and incident.cause == "GPU fell off the bus"
    assert incident.impact_gpu_hours is not None


def test_pages_need_an_operator(client, db):
    assert client.get("/health/").status_code == 302


def test_ops_incidents_api(ops_api, api, nodes, agent_for):
    _pull(nodes, agent_for, 2)
    body = ops_api.get("/api/v1/ops/incidents?page_size=1").json()
    assert len(body["results"]) == 1 and body["next_page_token"]
    second = ops_api.get(f"/api/v1/ops/incidents?page_size=1&page_token={body['next_page_token']}").json()
    assert second["results"][0]["id"] != body["results"][0]["id"]
    detail = ops_api.get(f"/api/v1/ops/incidents/{body['results'][0]['id']}").json()
    assert [e["step"] for e in detail["timeline"]][:2] == ["detect", "stabilise"]
    assert ops_api.get("/api/v1/ops/incidents/00000000-0000-0000-0000-000000000000").status_code == 404
    assert ops_api.get("/api/v1/ops/incidents?state=bogus").status_code == 400
    assert api.get("/api/v1/ops/incidents").status_code == 401


@pytest.mark.parametrize("pulled", [1, 4])
def test_incident_list_query_count_is_fixed(ops_api, nodes, agent_for, pulled, django_assert_max_num_queries):
    _pull(nodes, agent_for, pulled)
    with django_assert_max_num_queries(6):
        assert len(ops_api.get("/api/v1/ops/incidents").json()["results"]) == pulled


def test_conditions_for_nodes(nodes, agent_for):
    agent_for(nodes[0]).heartbeat(faults={1: {"temperature_c": 95}})
    out = selectors.conditions_for_nodes([nodes[0].pk, nodes[1].pk])
    assert out[nodes[1].pk] == []
    # one hot sample is a slowdown now; thermal_throttle needs it sustained (test_blackwell_and_links.py)
    assert out[nodes[0].pk][0]["signal"] == "thermal_slowdown" and out[nodes[0].pk][0]["gpu_index"] == 1


def test_charts_are_data(nodes, agent_for):
    _pull(nodes, agent_for, 2)
    fig = charts.health_by_hall_figure(selectors.health_by_hall())
    assert sum(sum(t.y) for t in fig.data) == Node.objects.count()
    causes = charts.failure_causes_figure(selectors.failure_causes(timezone.now() - timezone.timedelta(days=1)))
    assert [t.name for t in causes.data] == ["xid_79"] and sum(causes.data[0].y) == 2


def _pull_quarter_and_count(site_slug, gpus):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from devtools.services.fleet_seed import seed_fleet
    from tests.health.conftest import Agent

    seed_fleet(gpus=gpus, site_slug=site_slug, seed=len(site_slug) + gpus)
    nodes = list(Node.objects.filter(rack__hall__site__slug=site_slug).order_by("hostname"))
    for node in nodes:
        Agent(node).heartbeat(faults={0: {"xid_errors": [79]}} if node in nodes[::4] else None)
    with CaptureQueriesContext(connection) as pulling:
        run_health_sweep()
    with CaptureQueriesContext(connection) as quiet:
        run_health_sweep()
    assert Node.objects.filter(lifecycle=Lifecycle.REMEDIATING, rack__hall__site__slug=site_slug).count() == len(
        nodes[::4]
    )
    return len(pulling), len(quiet)


def test_sweep_query_count_independent_of_fleet_size(db):
    """Pulling a quarter of the fleet costs the same number of queries at 8 and 32 nodes."""
    small = _pull_quarter_and_count("dc1", 64)
    large = _pull_quarter_and_count("dc2", 256)
    assert small == large, (small, large)


def test_operator_opens_an_incident(operator_client, nodes):
    response = operator_client.post(
        "/health/incidents/new/", {"title": "PDU flicker", "hostnames": "nope", "severity": "warn"}
    )
    assert "Unknown hostnames: nope" in response.content.decode()
    response = operator_client.post(
        "/health/incidents/new/",
        {"title": "PDU flicker", "severity": "warn", "hostnames": f"{nodes[0].hostname}, {nodes[1].hostname}"},
    )
    incident = Incident.objects.get()
    assert response.status_code == 302 and incident.opened_by == "operator" and incident.nodes.count() == 2


def test_heartbeat_query_count_independent_of_faulty_gpus(nodes, agent_for):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    counts = []
    for node, faulty in ((nodes[0], 1), (nodes[1], 8)):
        agent = agent_for(node)
        agent.heartbeat()  # warm the node-type cache
        faults = {i: {"xid_errors": [13], "temperature_c": 90, "ecc_sbe": 1} for i in range(faulty)}
        with CaptureQueriesContext(connection) as ctx:
            assert agent.heartbeat(faults=faults).status_code == 202
        counts.append(len(ctx))
    assert counts[0] == counts[1] <= 8, counts


def test_an_incident_opened_by_hand_names_the_tenants_of_its_nodes(operator_client, nodes):
    from tests.fleet.lifecycle_helpers import allocate

    allocate(nodes[0])
    operator_client.post(
        "/health/incidents/new/",
        {"title": "PDU flicker", "severity": "warn", "hostnames": f"{nodes[0].hostname}, {nodes[1].hostname}"},
    )
    incident = Incident.objects.get()
    impact = incident.impacts.get()
    assert impact.tenant.slug == "acme" and impact.node == nodes[0] and impact.gpus == nodes[0].node_type.gpus_per_node
    page = operator_client.get(f"/health/incidents/{incident.pk}/").content.decode()
    assert "acme" in page and nodes[0].hostname in page


def test_out_of_service_lists_only_racks_with_nodes_in_repair_or_unhealthy(operator_client, nodes):
    from tests.fleet.lifecycle_helpers import place

    in_repair = nodes[-1]
    healthy_busy = next(n for n in nodes if n.rack_id != in_repair.rack_id)
    place(healthy_busy, "active")
    place(in_repair, "repair")
    html = operator_client.get("/health/").content.decode()
    table = html[html.index("Racks with nodes out of service") :]
    assert f">{in_repair.rack.name}</a>" in table
    assert f">{healthy_busy.rack.name}</a>" not in table  # healthy and allocated is in service
    assert f'href="/fleet/racks/{in_repair.rack_id}/"' in table
