"""The demo's BMCs: every demo node (256 for the 2,048-GPU fleet) gets a BMC record pointing at
a system of the Redfish emulator `make demo` runs on 127.0.0.1:8001 (sushy-emulator, fake
driver), so the node page's power buttons, the power sync loop and the health loop's power
cycles drive real Redfish over HTTP. The emulator's system list is written here, for the
process that serves it (devtools.demo.DEMO_PROCESSES)."""

from django.conf import settings
from django.db import transaction

from core.netguard import origin_of
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
    user, password = encrypt(DEMO_BMC_USER), encrypt(DEMO_BMC_PASSWORD)
    origin = origin_of(DEMO_REDFISH_URL)  # the credentials are bound to the emulator's address
    records = {b.node_id: b for b in NodeBMC.objects.all()}
    rows, wired = [], []
    for node in Node.objects.exclude(lifecycle="disposed"):
        record = records.get(node.pk)
        if record is not None and record.redfish_url:
            continue
        record = record or NodeBMC(node=node)
        record.redfish_url = DEMO_REDFISH_URL
        record.system_path = f"/redfish/v1/Systems/{system_uuid(node.hostname)}"
        record.username_encrypted, record.password_encrypted = user, password
        record.credentials_origin = origin
        (wired if record.pk and not record._state.adding else rows).append(record)
    NodeBMC.objects.bulk_create(rows, batch_size=1000)
    NodeBMC.objects.bulk_update(
        wired,
        ["redfish_url", "system_path", "username_encrypted", "password_encrypted", "credentials_origin"],
        batch_size=1000,
    )
    rows = rows + wired
    stdout.write(
        f"  {len(rows)} BMC records wired to the Redfish emulator at {DEMO_REDFISH_URL} ({len(hostnames)} systems)\n"
    )
