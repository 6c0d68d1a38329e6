"""Firmware versions from the BMC's Redfish FirmwareInventory into the software inventory
(source `bmc`), read by the power sync loop at a low rate; drift then covers firmware.

The emulator serves no FirmwareInventory members, so a small HTTP server answers with
responses recorded in the DMTF shape (Redfish UpdateService / SoftwareInventory schemas, as an
HGX BMC serves them); the emulator itself is the clean skip."""

import json
import threading
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.utils import timezone

from fleet.models import Node, NodeBMC, NodeSoftware
from fleet.selectors import drift_report
from fleet.services.baselines import create_baseline
from fleet.services.bmc_credentials import set_bmc
from fleet.services.firmware_inventory import FIRMWARE_REFRESH, component_name, refresh_firmware_inventories
from fleet.services.power_sync import power_sync_pass
from tests.redfish import allow_lab_bmc, attach_bmc

from .software_helpers import report_stack

pytestmark = pytest.mark.django_db

FW = "/redfish/v1/UpdateService/FirmwareInventory"
MEMBERS = {
    "BMC": ("BMC Firmware", "24.09-1"),
    "BIOS": ("System BIOS", "2.3.1"),
    "NIC.Slot.1-1": ("ConnectX-7 NIC", "28.42.1000"),
    "HGX_FW_GPU_SXM_1": ("GPU SXM 1 VBIOS", "96.00.89.00.01"),
}


def _recorded(path: str, bios: str) -> dict | None:
    path = path.rstrip("/")
    if path == "/redfish/v1":
        return {
            "@odata.id": "/redfish/v1/",
            "@odata.type": "#ServiceRoot.v1_15_0.ServiceRoot",
            "Id": "RootService",
            "Name": "Root Service",
            "RedfishVersion": "1.17.0",
            "UUID": "92384634-2938-2342-8820-489239905423",
            "Systems": {"@odata.id": "/redfish/v1/Systems"},
            "UpdateService": {"@odata.id": "/redfish/v1/UpdateService"},
        }
    if path == "/redfish/v1/UpdateService":
        return {
            "@odata.id": "/redfish/v1/UpdateService",
            "@odata.type": "#UpdateService.v1_11_0.UpdateService",
            "Id": "UpdateService",
            "Name": "Update Service",
            "ServiceEnabled": True,
            "FirmwareInventory": {"@odata.id": FW},
            "Actions": {
                "#UpdateService.SimpleUpdate": {
                    "target": "/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate",
                    "TransferProtocol@Redfish.AllowableValues": ["HTTPS"],
                }
            },
        }
    if path == FW:
        return {
            "@odata.id": FW,
            "@odata.type": "#SoftwareInventoryCollection.SoftwareInventoryCollection",
            "Name": "Firmware Inventory Collection",
            "Members@odata.count": len(MEMBERS),
            "Members": [{"@odata.id": f"{FW}/{m}"} for m in MEMBERS],
        }
    member = path.removeprefix(FW + "/")
    if member in MEMBERS:
        name, version = MEMBERS[member]
        if member == "BIOS":
            version = bios
        return {
            "@odata.id": f"{FW}/{member}",
            "@odata.type": "#SoftwareInventory.v1_9_0.SoftwareInventory",
            "Id": member,
            "Name": name,
            "Version": version,
            "Updateable": True,
            "Status": {"State": "Enabled", "Health": "OK"},
        }
    return None


@pytest.fixture
def recorded_bmc():
    """Start a Redfish service answering the recorded responses with the given BIOS version;
    returns its URL and the paths it was asked for."""
    servers = []

    def start(bios: str = "2.3.1"):
        asked: list[str] = []

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                asked.append(self.path)
                body = _recorded(self.path, bios)
                payload = json.dumps(body or {"error": {"code": "Base.1.8.ResourceMissingAtURI"}}).encode()
                self.send_response(200 if body else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args):
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return allow_lab_bmc(f"http://127.0.0.1:{server.server_address[1]}"), asked

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.fixture
def nodes(small_fleet):
    return list(Node.objects.select_related("node_type").order_by("hostname"))


def _attach(node, url):
    return set_bmc(node=node, redfish_url=url, system_path="", username="admin", password="pw", actor="test")


def test_component_names_fold_redfish_ids():
    assert component_name("BMC") == "bmc"
    assert component_name("NIC.Slot.1-1") == "nic_slot_1_1"
    assert component_name("1-CPLD") == "fw_1_cpld"
    assert len(component_name("X" * 80)) == 40


def test_the_sync_loop_stores_firmware_and_drift_covers_it(nodes, recorded_bmc):
    new_url, _ = recorded_bmc()
    old_url, requests = recorded_bmc(bios="2.1.0")
    _attach(nodes[0], new_url)
    _attach(nodes[1], old_url)
    for n in nodes[:2]:
        report_stack(n)  # the agent's rows are untouched by the BMC's
    summary = power_sync_pass(budget_s=30)
    assert summary["firmware_read"] == 2, (summary, requests, NodeBMC.objects.get(node=nodes[1]).last_error)
    rows = {r.component: r for r in NodeSoftware.objects.filter(node=nodes[1], source="bmc")}
    assert set(rows) == {"bmc", "bios", "nic_slot_1_1", "hgx_fw_gpu_sxm_1"}
    assert rows["bios"].version == "2.1.0" and rows["bios"].state == "ok"
    assert rows["nic_slot_1_1"].detail == "Redfish FirmwareInventory ConnectX-7 NIC"
    assert NodeSoftware.objects.filter(node=nodes[1], source="agent").count() == 9

    create_baseline(
        node_type=nodes[0].node_type, name="fw", versions={"bios": "2.3.1", "bmc": "24.09-1"}, actor="u", golden=True
    )
    groups = {g.component: g for g in drift_report().groups}
    assert groups["bios"].drifting == {"2.1.0": [nodes[1].hostname]}
    assert not groups["bmc"].drifting

    # Low rate: the next pass asks no firmware again until FIRMWARE_REFRESH has passed.
    before = len([r for r in requests if "FirmwareInventory" in r])
    assert power_sync_pass(budget_s=30)["firmware_read"] == 0
    assert len([r for r in requests if "FirmwareInventory" in r]) == before
    later = timezone.now() + FIRMWARE_REFRESH + timedelta(minutes=1)
    assert refresh_firmware_inventories(now=later)["firmware_read"] == 2


def test_a_pass_reads_at_most_its_limit(nodes, recorded_bmc):
    for n in nodes[:3]:
        _attach(n, recorded_bmc()[0])
    assert refresh_firmware_inventories(limit=2)["firmware_read"] == 2
    assert NodeBMC.objects.exclude(username_encrypted="").filter(firmware_checked_at__isnull=True).count() == 1
    assert refresh_firmware_inventories(limit=2)["firmware_read"] == 1  # the one left, not the same two


def test_a_bmc_without_firmware_inventory_is_a_clean_skip(nodes, redfish_emulator, emulated_system):
    attach_bmc(nodes[0], redfish_emulator, emulated_system())
    report_stack(nodes[0])
    summary = refresh_firmware_inventories()
    assert summary == {"firmware_read": 0, "firmware_skipped": 1, "firmware_errors": 0}
    assert not NodeSoftware.objects.filter(node=nodes[0], source="bmc").exists()
    assert NodeSoftware.objects.filter(node=nodes[0], source="agent").count() == 9
    assert NodeBMC.objects.get(node=nodes[0]).firmware_checked_at is not None
