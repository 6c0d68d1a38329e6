"""Console node pages and admin node actions."""

import pytest

from fleet.models import Node, NodeEvent

from .lifecycle_helpers import allocate, place

pytestmark = pytest.mark.django_db


def test_node_list_filters_and_fixed_queries(small_fleet, operator_client, django_assert_max_num_queries):
    nodes = list(Node.objects.order_by("hostname"))
    place(nodes[0], "triage")
    operator_client.get("/fleet/nodes/")  # session warm-up
    with django_assert_max_num_queries(10) as small:
        page = operator_client.get("/fleet/nodes/?lifecycle=triage").content.decode()
    assert nodes[0].hostname in page and nodes[1].hostname not in page
    with django_assert_max_num_queries(10) as large:
        page = operator_client.get("/fleet/nodes/?cordoned=false&site=dc1").content.decode()
    assert all(n.hostname in page for n in nodes)
    assert len(small) == len(large)
    bad = operator_client.get("/fleet/nodes/?lifecycle=bogus&hall=x&page=zz")
    assert bad.status_code == 200
    page = bad.content.decode()
    # the API's validation (NodeFilterSet): named errors and no rows, not a silently unfiltered list
    assert "Filter lifecycle" in page and "Filter hall" in page
    assert not any(n.hostname in page for n in nodes)


def test_node_page_shows_only_allowed_actions(small_fleet, operator_client):
    node = place(Node.objects.order_by("hostname").first(), "triage")
    page = operator_client.get(f"/fleet/nodes/{node.pk}/").content.decode()
    for allowed in ("validate", "repair", "rma", "decommission", "cordon"):
        assert f'value="{allowed}"' in page
    for forbidden in ("drain", "start_burn_in", "uncordon", "remediate"):
        assert f'value="{forbidden}"' not in page
    assert operator_client.get("/fleet/nodes/not-a-node/").status_code == 404


def test_operator_drains_a_node_from_the_console(small_fleet, operator_client):
    node = Node.objects.order_by("hostname").first()
    asked = operator_client.post(f"/fleet/nodes/{node.pk}/actions/", {"action": "drain", "reason": "fans"})
    page = asked.content.decode()
    assert asked.status_code == 200 and "Drain " + node.hostname + "?" in page and "no tenant is affected" in page
    node.refresh_from_db()
    assert not node.cordoned  # the first click only asks
    response = operator_client.post(
        f"/fleet/nodes/{node.pk}/actions/", {"action": "drain", "reason": "fans", "confirmed": "yes"}, follow=True
    )
    node.refresh_from_db()
    assert node.cordoned and node.cordon_reason == "fans"
    assert "drain done" in response.content.decode()
    refused = operator_client.post(f"/fleet/nodes/{node.pk}/actions/", {"action": "repair"}, follow=True)
    assert "repair is not allowed while" in refused.content.decode()
    assert NodeEvent.objects.filter(node=node, action="drain", actor="user:op").exists()


def test_admin_bulk_cordon(small_fleet, operator_client):
    nodes = list(Node.objects.order_by("hostname")[:2])
    selection = {"action": "cordon_nodes", "_selected_action": [str(n.pk) for n in nodes]}
    operator_client.post("/admin/fleet/node/", selection)  # the confirmation page: nothing runs yet
    assert Node.objects.filter(cordoned=True).count() == 0
    operator_client.post("/admin/fleet/node/", {**selection, "confirm": "yes"})
    assert Node.objects.filter(cordoned=True).count() == 2
    assert NodeEvent.objects.filter(action="cordon").count() == 2


def test_pages_need_an_operator(small_fleet, client):
    assert client.get("/fleet/nodes/").status_code in (302, 403)


def test_decommissioning_an_allocated_node_names_the_tenant_and_needs_force(small_fleet, operator_client, ops_api):
    node = Node.objects.order_by("hostname").first()
    allocate(node)
    url = f"/fleet/nodes/{node.pk}/actions/"
    asked = operator_client.post(url, {"action": "decommission"}).content.decode()
    assert "allocation job of tenant acme" in asked and 'name="force"' in asked
    refused = operator_client.post(url, {"action": "decommission", "confirmed": "yes"}, follow=True).content.decode()
    assert "is allocated (job of tenant acme)" in refused and "Drain it first" in refused
    node.refresh_from_db()
    assert node.lifecycle == "available"
    api = f"/api/v1/ops/nodes/{node.pk}/actions"
    conflict = ops_api.post(api, {"action": "decommission"}, format="json", HTTP_IDEMPOTENCY_KEY="d1")
    assert conflict.status_code == 409 and conflict.json()["code"] == "node_allocated"
    assert conflict.json()["allocations"][0]["tenant"] == "acme"
    forced = ops_api.post(api, {"action": "decommission", "force": True}, format="json", HTTP_IDEMPOTENCY_KEY="d2")
    assert forced.status_code == 202, forced.content
    node.refresh_from_db()
    assert node.lifecycle == "decommissioning"


def test_node_page_links_rack_allocation_and_tenant_and_says_how_old_the_heartbeat_is(small_fleet, operator_client):
    from datetime import timedelta

    from django.utils import timezone

    node = Node.objects.order_by("hostname").first()
    membership = allocate(node)
    Node.objects.filter(pk=node.pk).update(last_heartbeat_at=timezone.now() - timedelta(hours=3, minutes=12))
    html = operator_client.get(f"/fleet/nodes/{node.pk}/").content.decode()
    assert "3 h 12 min ago" in html
    assert f'href="/fleet/racks/{node.rack_id}/"' in html  # breadcrumbs and place
    assert f"/admin/tenants/allocation/{membership.allocation_id}/change/" in html and "#tenant-acme" in html
    assert 'id="fleet-nav"' in html
    rack = operator_client.get(f"/fleet/racks/{node.rack_id}/").content.decode()
    assert 'class="breadcrumbs"' in rack and 'id="fleet-nav"' in rack


def _heartbeat(node, gpus: list[dict]):
    from rest_framework.test import APIClient

    from core.api.agent_tokens import mint_agent_token

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {mint_agent_token(node.pk)}")
    response = client.post("/api/agent/v1/heartbeat", {"power_state": "on", "gpus": gpus}, format="json")
    assert response.status_code == 202, response.content


def _gpu(index: int, **fields) -> dict:
    return {"index": index, "temperature_c": 55, "power_w": 400, "ecc_sbe": 0, "ecc_dbe": 0, "xid_errors": [], **fields}


def test_node_page_shows_the_last_heartbeats_gpu_telemetry_with_its_age(
    small_fleet, operator_client, django_assert_num_queries
):
    from datetime import timedelta

    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone

    node, silent = Node.objects.order_by("hostname")[:2]
    gpus = [_gpu(i) for i in range(8)]
    gpus[3] = _gpu(3, temperature_c=84.6, power_w=712, xid_errors=[79, 79, 48], ecc_sbe=2, row_remap_pending=3)
    _heartbeat(node, gpus)
    url = f"/fleet/nodes/{node.pk}/"
    operator_client.get(url)  # session warm-up
    with CaptureQueriesContext(connection) as without_telemetry:
        empty = operator_client.get(f"/fleet/nodes/{silent.pk}/").content.decode()
    assert "No telemetry yet" in empty
    # the figures ride on the node row: a node that reports costs the page no extra query
    with django_assert_num_queries(len(without_telemetry)):
        html = operator_client.get(url).content.decode()
    row = html.split('id="gpu-telemetry"')[1].split("</table>")[0]
    assert "85 °C" in row and "712 W" in row and "48, 79" in row and "2 / 0" in row and "yes (3 rows)" in row
    assert "55 °C" in row and "400 W" in row
    assert "GPU board power" in row and "node power" not in html.lower()
    assert "stale" not in row and "Last telemetry from the heartbeat received" in html

    # three minutes without a heartbeat that lists GPUs: the page says how old the figures are and that they are stale
    telemetry = Node.objects.get(pk=node.pk).gpu_telemetry
    telemetry["at"] = (timezone.now() - timedelta(minutes=3)).isoformat()
    Node.objects.filter(pk=node.pk).update(gpu_telemetry=telemetry)
    _heartbeat(node, [])  # a heartbeat without GPUs keeps the last report and its time
    html = operator_client.get(url).content.decode()
    age = html.split('id="gpu-telemetry-age"')[1].split("</p>")[0]
    assert "3 min ago" in age and '<strong class="stale">stale</strong>' in age
    assert "85 °C" in html.split('id="gpu-telemetry"')[1]

    # a fresh report replaces it, and a GPU missing from it says so
    _heartbeat(node, [_gpu(i, temperature_c=60) for i in range(7)])
    html = operator_client.get(url).content.decode()
    row = html.split('id="gpu-telemetry"')[1].split("</table>")[0]
    assert "stale" not in html.split('id="gpu-telemetry-age"')[1].split("</p>")[0]
    assert "60 °C" in row and "85 °C" not in row and row.count("not in the last report") == 1
