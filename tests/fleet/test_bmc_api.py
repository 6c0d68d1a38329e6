"""The BMC record and power actions through the operator API and the console, against the
emulated BMC; the attacker's requests (credentials read back, oversized or smuggled input, a
tenant's node powered off under it) are refused."""

import uuid

import pytest

from fleet.models import BMCPowerAction, Node, NodeBMC
from tests.fleet.lifecycle_helpers import allocate
from tests.redfish import attach_bmc


@pytest.fixture
def node(small_fleet):
    return Node.objects.order_by("hostname").first()


def _put(ops_api, node, body):
    return ops_api.put(f"/api/v1/ops/nodes/{node.pk}/bmc", body, format="json")


def _power(ops_api, node, action, key=None):
    return ops_api.post(
        f"/api/v1/ops/nodes/{node.pk}/power",
        {"action": action, "reason": "api test"},
        format="json",
        HTTP_IDEMPOTENCY_KEY=key or str(uuid.uuid4()),
    )


def test_credentials_are_write_only(ops_api, node, redfish_emulator, emulated_system):
    system = emulated_system()
    body = {
        "redfish_url": redfish_emulator.url,
        "system_path": redfish_emulator.system_path(system),
        "username": "bmc-admin-user",
        "password": "s3cret-bmc-password",
    }
    put = _put(ops_api, node, body)
    assert put.status_code == 200, put.content
    got = ops_api.get(f"/api/v1/ops/nodes/{node.pk}/bmc")
    for response in (put, got):
        text = response.content.decode()
        assert "s3cret-bmc-password" not in text and "bmc-admin-user" not in text
        assert response.json()["credentials_set"] is True
    # An address change keeps the stored credentials.
    moved = _put(ops_api, node, {"redfish_url": redfish_emulator.url + "/", "system_path": body["system_path"]})
    assert moved.status_code == 200 and moved.json()["credentials_set"] is True


@pytest.mark.parametrize(
    "body",
    [
        {"redfish_url": "ftp://10.0.0.1"},
        {"redfish_url": "https://root:calvin@10.0.0.1"},
        {"redfish_url": "https://10.0.0.1", "password": "only-half"},
        {"redfish_url": "https://10.0.0.1", "username": "u", "password": "p" * 257},
        {"redfish_url": "https://10.0.0.1", "system_path": "/etc/passwd"},
        {"redfish_url": "https://" + "a" * 400},
    ],
)
def test_bad_bmc_records_are_400(ops_api, node, body):
    before = list(NodeBMC.objects.filter(node=node).values())
    response = _put(ops_api, node, body)
    assert response.status_code == 400, response.content
    assert list(NodeBMC.objects.filter(node=node).values()) == before  # nothing written


def test_power_cycle_through_the_api_answers_with_the_bmcs_answer(ops_api, node, redfish_emulator, emulated_system):
    system = emulated_system()
    attach_bmc(node, redfish_emulator, system)
    key = str(uuid.uuid4())
    response = _power(ops_api, node, "power_cycle", key)
    assert response.status_code == 202, response.content
    newest = response.json()["power_actions"][0]
    assert newest["state"] == "accepted" and newest["reset_type"] == "ForceRestart"
    assert "accepted by" in newest["bmc_response"]
    replay = _power(ops_api, node, "power_cycle", key)
    assert replay.status_code == 202 and BMCPowerAction.objects.filter(node=node).count() == 1
    assert redfish_emulator.wait_for_power(system, "On") == "On"


def test_a_tenants_node_is_not_powered_off_under_it(ops_api, node, redfish_emulator, emulated_system):
    system = emulated_system()
    attach_bmc(node, redfish_emulator, system)
    allocate(node)
    response = _power(ops_api, node, "force_off")
    assert response.status_code == 409 and response.json()["code"] == "node_in_use"
    assert not BMCPowerAction.objects.filter(node=node).exists()
    assert redfish_emulator.power_state(system) == "On"


def test_power_refusals_are_4xx_problems(ops_api, node):
    assert _power(ops_api, node, "self_destruct").status_code == 400
    no_bmc = _power(ops_api, node, "power_on")
    assert no_bmc.status_code == 409 and no_bmc.json()["code"] == "no_bmc"
    assert _power(ops_api, Node(pk=uuid.uuid4()), "power_on").status_code == 404


def test_console_power_cycle_asks_first_then_shows_the_bmcs_answer(
    operator_client, node, redfish_emulator, emulated_system
):
    system = emulated_system()
    attach_bmc(node, redfish_emulator, system)
    page = operator_client.get(f"/fleet/nodes/{node.pk}/").content.decode()
    assert 'id="node-power"' in page and "Power cycle" in page
    confirm = operator_client.get(f"/fleet/nodes/{node.pk}/power/?action=power_cycle").content.decode()
    assert f"Power cycle {node.hostname}?" in confirm and "unsaved work is lost" in confirm
    assert not BMCPowerAction.objects.filter(node=node).exists()  # asking is not doing
    done = operator_client.post(
        f"/fleet/nodes/{node.pk}/power/", {"action": "power_cycle", "confirm": "yes", "reason": "hung"}, follow=True
    )
    text = done.content.decode()
    assert "ForceRestart accepted by" in text and 'id="power-open"' in text
    assert BMCPowerAction.objects.get(node=node).state == "accepted"
    assert redfish_emulator.wait_for_power(system, "On") == "On"
