"""Enrolment from a range of BMC addresses, and the disposition checklist's BMC reset as a
Redfish call, against the emulated BMC."""

import uuid
from decimal import Decimal

import pytest

from devtools.redfish_emulator import RedfishEmulator, free_port, system_mac, system_uuid
from fleet.choices import Lifecycle
from fleet.models import Node, NodeBMC, NodeDisposal, NodeEvent, Rack
from tests.fleet.lifecycle_helpers import place
from tests.redfish import allow_lab_bmc, attach_bmc

NEW_RACK = ["new-000", "new-001", "new-002"]


@pytest.fixture(scope="module")
def new_rack_bmcs():
    """A chassis manager serving a new rack's three systems."""
    emulator = RedfishEmulator(systems=NEW_RACK).start()
    allow_lab_bmc(emulator.url)
    yield emulator
    emulator.stop()


@pytest.fixture
def empty_rack(small_fleet):
    rack = Rack.objects.filter(nodes__isnull=False).first()
    rack.pk, rack.name, rack.row, rack.column = None, "r-new", 90, 90
    rack.rated_power_kw = rack.cooling_capacity_kw = Decimal("60")
    rack.save()
    return rack


def _enrol(ops_api, emulator, rack, addresses):
    return ops_api.post(
        "/api/v1/ops/bmc-enrolments",
        {
            "addresses": addresses,
            "scheme": "http",
            "username": emulator.username,
            "password": emulator.password,
            "rack_id": str(rack.pk),
            "node_type": Node.objects.first().node_type.slug,
            "hostname_prefix": "rnew-gpu",
        },
        format="json",
    )


def test_a_new_rack_is_enrolled_from_its_bmcs(ops_api, new_rack_bmcs, empty_rack):
    dead = allow_lab_bmc(f"http://127.0.0.1:{free_port()}")  # a lab BMC that does not answer
    response = _enrol(ops_api, new_rack_bmcs, empty_rack, [new_rack_bmcs.url, dead])
    assert response.status_code == 201, response.content
    body = response.json()
    assert [e["hostname"] for e in body["enrolled"]] == ["rnew-gpu001", "rnew-gpu002", "rnew-gpu003"]
    assert body["unreachable"][0]["address"] == dead and body["unreachable"][0]["kind"] == "unreachable"
    assert new_rack_bmcs.password not in response.content.decode()
    for name in NEW_RACK:
        node = Node.objects.get(serial=system_uuid(name))  # the emulator has no SerialNumber: the UUID stands in
        assert node.lifecycle == Lifecycle.ENROLLED and node.rack == empty_rack and node.power_state == "on"
        bmc = NodeBMC.objects.get(node=node)
        assert bmc.has_credentials and bmc.system_path == new_rack_bmcs.system_path(name)
        assert bmc.inventory["macs"] == sorted([system_mac(name, 0), system_mac(name, 1)])
        assert NodeEvent.objects.filter(node=node, action="enrol").exists()
    positions = sorted(Node.objects.filter(rack=empty_rack).values_list("u_position", flat=True))
    height = Node.objects.first().node_type.u_height
    assert positions == [1, 1 + height, 1 + 2 * height]

    again = _enrol(ops_api, new_rack_bmcs, empty_rack, [new_rack_bmcs.url])
    assert again.status_code == 201 and again.json()["enrolled"] == []
    assert {s["why"] for s in again.json()["skipped"]} == {"already enrolled"}


def test_enrolled_nodes_are_listed_newest_first_and_only_for_operators(ops_api, new_rack_bmcs, empty_rack, api):
    assert ops_api.get("/api/v1/ops/bmc-enrolments").json()["results"] == []
    assert _enrol(ops_api, new_rack_bmcs, empty_rack, [new_rack_bmcs.url]).status_code == 201
    listed = ops_api.get("/api/v1/ops/bmc-enrolments?page_size=2")
    assert listed.status_code == 200, listed.content
    body = listed.json()
    assert len(body["results"]) == 2 and body["next_page_token"]
    first = body["results"][0]
    assert first["redfish_url"] == new_rack_bmcs.url and first["lifecycle"] == Lifecycle.ENROLLED
    assert "password" not in listed.content.decode() and new_rack_bmcs.password not in listed.content.decode()
    rest = ops_api.get(f"/api/v1/ops/bmc-enrolments?page_size=2&page_token={body['next_page_token']}").json()
    hostnames = {r["hostname"] for r in body["results"] + rest["results"]}
    assert hostnames == {"rnew-gpu001", "rnew-gpu002", "rnew-gpu003"}
    assert api.get("/api/v1/ops/bmc-enrolments").status_code in (401, 403)  # no operator token


@pytest.mark.parametrize("addresses", [[], ["10.0.0.1-10.0.9.1"], ["not-an-address"], ["ftp://x"], ["10.0.0.0/16"]])
def test_bad_address_lists_are_400_and_nothing_is_asked(ops_api, new_rack_bmcs, empty_rack, addresses):
    response = _enrol(ops_api, new_rack_bmcs, empty_rack, addresses)
    assert response.status_code == 400, response.content
    assert not Node.objects.filter(rack=empty_rack).exists()


def test_disposition_bmc_reset_goes_to_the_bmc_and_keeps_its_refusal(
    ops_api, small_fleet, redfish_emulator, emulated_system
):
    node = place(Node.objects.order_by("hostname").first(), Lifecycle.SANITIZING)
    attach_bmc(node, redfish_emulator, emulated_system())
    url = f"/api/v1/ops/nodes/{node.pk}/bmc-reset"
    refused = ops_api.post(url, {"reason": "leaving"}, format="json", HTTP_IDEMPOTENCY_KEY=str(uuid.uuid4()))
    # The emulated BMC offers no #Manager.ResetToDefaults: a real refusal, kept on the trail.
    assert refused.status_code == 409 and refused.json()["code"] == "bmc_reset_failed"
    assert "ResetToDefaults" in refused.json()["detail"]
    assert NodeEvent.objects.filter(node=node, action="bmc_reset_failed").exists()
    assert not NodeDisposal.objects.filter(node=node, bmc_reset_at__isnull=False).exists()
    by_hand = ops_api.post(
        url, {"reason": "reset by jumper, photo DOC-7", "manual": True}, format="json", HTTP_IDEMPOTENCY_KEY="m1"
    )
    assert by_hand.status_code == 201, by_hand.content
    evidence = by_hand.json()["bmc_reset_evidence"]
    assert evidence["method"] == "recorded by hand" and evidence["reason"] == "reset by jumper, photo DOC-7"
