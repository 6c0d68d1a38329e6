"""Chassis power from the BMC for nodes whose agent reports none, read by the power sync loop.

sushy-emulator's fake driver serves no chassis power, so these tests serve recorded Redfish
responses in the DMTF schema's shape (ServiceRoot, ComputerSystem, Chassis, Power v1.7) from a
small HTTP server on a free loopback port: real HTTP through sushy, as in production."""

import json
import threading
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.test import override_settings
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from fleet.models import Node, NodeBMC
from fleet.services.power_sync import power_sync_pass
from tests.redfish import allow_lab_bmc


def _redfish_tree(
    *, watts: float | None, with_power: bool = True, environment_watts: float | None = None
) -> dict[str, dict]:
    chassis = {
        "@odata.id": "/redfish/v1/Chassis/1U",
        "@odata.type": "#Chassis.v1_14_0.Chassis",
        "Id": "1U",
        "Name": "Computer System Chassis",
        "ChassisType": "RackMount",
        "Links": {"ComputerSystems": [{"@odata.id": "/redfish/v1/Systems/437XR1138R2"}]},
    }
    tree = {
        "/redfish/v1/": {
            "@odata.id": "/redfish/v1/",
            "@odata.type": "#ServiceRoot.v1_5_0.ServiceRoot",
            "Id": "RootService",
            "Name": "Root Service",
            "RedfishVersion": "1.8.0",
            "UUID": "92384634-2938-2342-8820-489239905423",
            "Systems": {"@odata.id": "/redfish/v1/Systems"},
            "Chassis": {"@odata.id": "/redfish/v1/Chassis"},
        },
        "/redfish/v1/Systems": {
            "@odata.id": "/redfish/v1/Systems",
            "@odata.type": "#ComputerSystemCollection.ComputerSystemCollection",
            "Name": "Computer System Collection",
            "Members@odata.count": 1,
            "Members": [{"@odata.id": "/redfish/v1/Systems/437XR1138R2"}],
        },
        "/redfish/v1/Systems/437XR1138R2": {
            "@odata.id": "/redfish/v1/Systems/437XR1138R2",
            "@odata.type": "#ComputerSystem.v1_5_0.ComputerSystem",
            "Id": "437XR1138R2",
            "Name": "WebFrontEnd483",
            "PowerState": "On",
            "Actions": {
                "#ComputerSystem.Reset": {
                    "target": "/redfish/v1/Systems/437XR1138R2/Actions/ComputerSystem.Reset",
                    "ResetType@Redfish.AllowableValues": ["On", "ForceOff", "ForceRestart"],
                }
            },
            "Links": {"Chassis": [{"@odata.id": "/redfish/v1/Chassis/1U"}]},
        },
        "/redfish/v1/Chassis": {
            "@odata.id": "/redfish/v1/Chassis",
            "@odata.type": "#ChassisCollection.ChassisCollection",
            "Name": "Chassis Collection",
            "Members@odata.count": 1,
            "Members": [{"@odata.id": "/redfish/v1/Chassis/1U"}],
        },
        "/redfish/v1/Chassis/1U": chassis,
    }
    if environment_watts is not None:
        chassis["EnvironmentMetrics"] = {"@odata.id": "/redfish/v1/Chassis/1U/EnvironmentMetrics"}
        tree["/redfish/v1/Chassis/1U/EnvironmentMetrics"] = {
            "@odata.id": "/redfish/v1/Chassis/1U/EnvironmentMetrics",
            "@odata.type": "#EnvironmentMetrics.v1_3_0.EnvironmentMetrics",
            "Id": "EnvironmentMetrics",
            "Name": "Chassis Environment Metrics",
            "PowerWatts": {"DataSourceUri": "/redfish/v1/Chassis/1U/Sensors/TotalPower", "Reading": environment_watts},
        }
    if with_power:
        chassis["Power"] = {"@odata.id": "/redfish/v1/Chassis/1U/Power"}
        tree["/redfish/v1/Chassis/1U/Power"] = {
            "@odata.id": "/redfish/v1/Chassis/1U/Power",
            "@odata.type": "#Power.v1_7_0.Power",
            "Id": "Power",
            "Name": "Power",
            "PowerControl": [
                {
                    "@odata.id": "/redfish/v1/Chassis/1U/Power#/PowerControl/0",
                    "MemberId": "0",
                    "Name": "Server Power Control",
                    "PowerConsumedWatts": watts,
                    "PowerCapacityWatts": 12000,
                    "PowerMetrics": {"IntervalInMin": 1, "MinConsumedWatts": 5210, "MaxConsumedWatts": 7012},
                }
            ],
        }
    return tree


class RecordedBMC:
    """A Redfish service answering GETs from recorded responses; anything else is a 404."""

    def __init__(self, tree: dict[str, dict]):
        self.tree = tree
        self.requests: list[str] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                path = self.path.split("?")[0]
                owner.requests.append(path)
                body = owner.tree.get(path) or owner.tree.get(path.rstrip("/"))
                status = 200 if body is not None else 404
                payload = json.dumps(body or {"error": {"code": "Base.1.0.ResourceMissingAtURI"}}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = allow_lab_bmc(f"http://127.0.0.1:{self.server.server_address[1]}")
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def recorded_bmc():
    started = []

    def start(**kwargs) -> RecordedBMC:
        bmc = RecordedBMC(_redfish_tree(**kwargs))
        started.append(bmc)
        return bmc

    yield start
    for bmc in started:
        bmc.stop()


def _wire(node, bmc: RecordedBMC) -> NodeBMC:
    from fleet.services.bmc_credentials import set_bmc

    return set_bmc(
        node=node,
        redfish_url=bmc.url,
        system_path="/redfish/v1/Systems/437XR1138R2",
        username="admin",
        password="recorded",
        actor="test",
    )


@pytest.fixture
def silent_node(small_fleet):
    """A node whose agent last spoke ten minutes ago (GPU power and a PDU reading, both stale)."""
    node = Node.objects.order_by("hostname").first()
    stale = timezone.now() - timedelta(minutes=10)
    Node.objects.filter(pk=node.pk).update(
        last_heartbeat_at=stale, gpu_power_w=5000, wall_power_w=9000, wall_power_source="pdu", wall_power_at=stale
    )
    return node


def test_a_silent_node_gets_the_bmcs_chassis_power_as_its_wall_reading(
    silent_node, recorded_bmc, ops_api, operator_client
):
    bmc = recorded_bmc(watts=6840)
    _wire(silent_node, bmc)
    summary = power_sync_pass(budget_s=30)
    assert summary["read"] == 1 and summary["watts_read"] == 1
    silent_node.refresh_from_db()
    record = NodeBMC.objects.get(node=silent_node)
    assert (silent_node.wall_power_w, silent_node.wall_power_source) == (6840, "bmc")
    assert silent_node.wall_power_at == record.power_read_at
    assert timezone.now() - silent_node.wall_power_at < timedelta(seconds=30)
    assert "/redfish/v1/Chassis/1U/Power" in bmc.requests

    # The power page, the rack figure and /metrics show it as measured by the BMC.
    families = {f.name: f for f in text_string_to_metric_families(ops_api.get("/metrics").content.decode())}
    rack = silent_node.rack
    rack_sources = {s.labels["rack"]: s.labels["source"] for s in families["hangar_rack_power_kw"].samples}
    assert any(name.endswith(rack.name) and source in ("bmc", "mixed") for name, source in rack_sources.items())
    assert any(s.labels["source"] == "bmc" and s.value >= 1 for s in families["hangar_hall_power_nodes"].samples), (
        families["hangar_hall_power_nodes"].samples
    )
    page = operator_client.get("/fleet/power/")
    assert page.status_code == 200 and "1 bmc" in page.content.decode()  # the hall row's source mix

    # The next pass keeps reading it (its own reading does not count as the agent's).
    bmc.tree["/redfish/v1/Chassis/1U/Power"]["PowerControl"][0]["PowerConsumedWatts"] = 7012
    assert power_sync_pass(budget_s=30)["watts_read"] == 1
    silent_node.refresh_from_db()
    assert silent_node.wall_power_w == 7012


def test_a_bmc_with_only_the_newer_environment_metrics_is_read(silent_node, recorded_bmc):
    _wire(silent_node, recorded_bmc(watts=None, with_power=False, environment_watts=7450.5))
    assert power_sync_pass(budget_s=30)["watts_read"] == 1
    silent_node.refresh_from_db()
    assert (silent_node.wall_power_w, silent_node.wall_power_source) == (7450, "bmc")


def test_a_fresh_agent_reading_is_not_overwritten(small_fleet, recorded_bmc):
    node = Node.objects.order_by("hostname").first()
    now = timezone.now()
    Node.objects.filter(pk=node.pk).update(
        last_heartbeat_at=now, gpu_power_w=5000, wall_power_w=9100, wall_power_source="pdu", wall_power_at=now
    )
    bmc = recorded_bmc(watts=6840)
    _wire(node, bmc)
    summary = power_sync_pass(budget_s=30)
    assert summary["read"] == 1 and summary["watts_read"] == 0
    node.refresh_from_db()
    assert (node.wall_power_w, node.wall_power_source, node.wall_power_at) == (9100, "pdu", now)
    assert not any(path.startswith("/redfish/v1/Chassis") for path in bmc.requests)

    # Only GPU power from the agent (no meter): fresh too, so the BMC is not asked either.
    Node.objects.filter(pk=node.pk).update(wall_power_w=None, wall_power_source="", wall_power_at=None)
    assert power_sync_pass(budget_s=30)["watts_read"] == 0
    node.refresh_from_db()
    assert node.wall_power_w is None


def test_a_bmc_without_a_power_resource_is_a_clean_skip(silent_node, recorded_bmc, caplog):
    Node.objects.filter(pk=silent_node.pk).update(last_error="")
    bmc = recorded_bmc(watts=None, with_power=False)
    _wire(silent_node, bmc)
    with caplog.at_level("WARNING"):
        summary = power_sync_pass(budget_s=30)
    assert summary["read"] == 1 and summary["watts_read"] == 0 and summary["watts_absent"] == 1
    assert summary["errors"] == 0 and summary["watts_failed"] == 0
    silent_node.refresh_from_db()
    record = NodeBMC.objects.get(node=silent_node)
    assert silent_node.last_error == "" and record.last_error == "" and record.reachable is True
    assert silent_node.wall_power_source == "pdu" and silent_node.wall_power_w == 9000  # the stale reading stays
    assert record.power_read_at is not None  # tried: it goes to the back of the queue
    assert not [r for r in caplog.records if r.levelname in ("WARNING", "ERROR")]

    # A PowerControl without a reading (PowerConsumedWatts null) is the same skip.
    other = Node.objects.order_by("hostname")[1]
    Node.objects.filter(pk=other.pk).update(last_heartbeat_at=None, gpu_power_w=None)
    _wire(other, recorded_bmc(watts=None))
    assert power_sync_pass(budget_s=30)["watts_absent"] == 2


def test_a_reading_above_the_types_maximum_is_refused(silent_node, recorded_bmc, caplog):
    node_kw = silent_node.node_type.node_kw  # 10.2 kW for a DGX H100
    _wire(silent_node, recorded_bmc(watts=float(node_kw) * 1000 + 1500))
    with caplog.at_level("WARNING"):
        summary = power_sync_pass(budget_s=30)
    assert summary["watts_refused"] == 1 and summary["watts_read"] == 0
    silent_node.refresh_from_db()
    assert (silent_node.wall_power_w, silent_node.wall_power_source) == (9000, "pdu")  # kept its previous reading
    assert any("refused" in r.getMessage() and str(silent_node.pk) in r.getMessage() for r in caplog.records)


def test_reads_are_bounded_per_pass_least_recently_read_first(small_fleet, recorded_bmc):
    nodes = list(Node.objects.order_by("hostname")[:3])
    Node.objects.filter(pk__in=[n.pk for n in nodes]).update(last_heartbeat_at=None, gpu_power_w=None)
    bmc = recorded_bmc(watts=6000)
    for node in nodes:
        _wire(node, bmc)
    with override_settings(BMC_POWER_READS_PER_PASS=2):
        assert power_sync_pass(budget_s=30)["watts_read"] == 2
        first = set(NodeBMC.objects.filter(power_read_at__isnull=False).values_list("node_id", flat=True))
        assert power_sync_pass(budget_s=30)["watts_read"] == 2
    (left_out,) = {n.pk for n in nodes} - first
    # Only the three wired here have been read; PostgreSQL sorts the never-read (NULL) first in DESC.
    latest = (
        NodeBMC.objects.filter(power_read_at__isnull=False)
        .order_by("-power_read_at")
        .values_list("power_read_at", flat=True)
        .first()
    )
    assert NodeBMC.objects.get(node_id=left_out).power_read_at == latest  # the one never read went first
    assert set(Node.objects.filter(wall_power_source="bmc").values_list("pk", flat=True)) == {n.pk for n in nodes}
