"""The demo's BMCs: every demo node (256 for the 2,048-GPU fleet) gets a BMC record pointing at
a system of the Redfish emulator `make demo` runs on 127.0.0.1:8001 (sushy-emulator, fake
driver), so the node page's power buttons, the power sync loop and the health loop's power
cycles drive real Redfish over HTTP. The emulator's system list is written here, for the
process that serves it (devtools.demo.DEMO_PROCESSES)."""

from django.conf import settings
from django.db import transaction

from devtools.redfish_emulator import system_uuid
from fleet.models import Node, NodeBMC
from fleet.services.bmc_credentials import encrypt

DEMO_REDFISH_URL = "http://127.0.0.1:8001"
DEMO_BMC_USER, DEMO_BMC_PASSWORD = "admin", "redfish-emulator-password"
SYSTEMS_FILE = "demo-redfish-systems.txt"


def systems_file():
    return settings.VAR_DIR / SYSTEMS_FILE


@transaction.atomic
def wire_demo_bmcs(stdout) -> None:
    hostnames = list(Node.objects.exclude(lifecycle="disposed").order_by("hostname").values_list("hostname", flat=True))
    systems_file().write_text("\n".join(hostnames) + "\n")
    have = set(NodeBMC.objects.values_list("node__hostname", flat=True))
    user, password = encrypt(DEMO_BMC_USER), encrypt(DEMO_BMC_PASSWORD)
    rows = [
        NodeBMC(
            node=node,
            redfish_url=DEMO_REDFISH_URL,
            system_path=f"/redfish/v1/Systems/{system_uuid(node.hostname)}",
            username_encrypted=user,
            password_encrypted=password,
        )
        for node in Node.objects.exclude(hostname__in=have).exclude(lifecycle="disposed")
    ]
    NodeBMC.objects.bulk_create(rows, batch_size=1000)
    stdout.write(
        f"  {len(rows)} BMC records wired to the Redfish emulator at {DEMO_REDFISH_URL} ({len(hostnames)} systems)\n"
    )
