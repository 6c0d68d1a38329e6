"""`make demo` wires every node to a system of its Redfish emulator, idempotently, and the
emulator process it starts serves exactly those systems."""

import io

from devtools.demo import DEMO_PROCESSES, DEMO_SEED_STEPS
from devtools.redfish_emulator import system_uuid
from devtools.services.demo_bmc import DEMO_BMC_PASSWORD, DEMO_REDFISH_URL, systems_file, wire_demo_bmcs
from fleet.models import Node, NodeBMC
from fleet.services.bmc_credentials import target_for


def test_demo_nodes_are_wired_to_the_emulator_once(small_fleet):
    assert "devtools.services.demo_bmc.wire_demo_bmcs" in DEMO_SEED_STEPS
    assert any("devtools.redfish_emulator" in argv for _, argv in DEMO_PROCESSES)
    wire_demo_bmcs(io.StringIO())
    wire_demo_bmcs(io.StringIO())
    nodes = list(Node.objects.order_by("hostname"))
    assert NodeBMC.objects.count() == len(nodes)
    bmc = NodeBMC.objects.get(node=nodes[0])
    assert bmc.redfish_url == DEMO_REDFISH_URL and bmc.system_path.endswith(system_uuid(nodes[0].hostname))
    assert DEMO_BMC_PASSWORD not in bmc.password_encrypted and target_for(bmc).password == DEMO_BMC_PASSWORD
    assert systems_file().read_text().split() == [n.hostname for n in nodes]
