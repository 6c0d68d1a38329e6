"""BMC, BIOS, NIC and other firmware versions from each node's BMC (Redfish
`UpdateService/FirmwareInventory`) into the node's software inventory, as source `bmc`.

Firmware changes only when someone flashes it, so each BMC is read at most once per
FIRMWARE_REFRESH and at most FIRMWARE_PER_PASS BMCs per pass (the power sync loop calls this
after its power reads, with what is left of its time budget): a 2,048-node fleet is covered in
a few hours without adding more than a few dozen requests to any minute. A BMC without the
resource (the emulator, some older BMCs) is a clean skip: it is marked checked and its node
keeps no `bmc` rows; a failing read is also marked checked (the power sync reports
reachability every minute) and tried again one interval later.
"""

import re
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta

from django.db.models import F, Q
from django.utils import timezone

from fleet.choices import BMCErrorKind, ComponentState, InventorySource
from fleet.models import NodeBMC

from . import bmc as redfish
from .bmc_credentials import CredentialsUnreadable, target_for
from .software_inventory import MAX_COMPONENTS, Component, store_software_inventory

FIRMWARE_REFRESH = timedelta(hours=6)
FIRMWARE_PER_PASS = 32
FIRMWARE_CONCURRENCY = 8
SKIPPED_KINDS = (BMCErrorKind.NOT_SUPPORTED, BMCErrorKind.NOT_FOUND)


def component_name(redfish_id: str) -> str:
    """A FirmwareInventory member's Id as a component name: `BMC` → `bmc`, `BIOS` → `bios`,
    `NIC.Slot.1-1` → `nic_slot_1_1`, `HGX_FW_GPU_SXM_1` → `hgx_fw_gpu_sxm_1`. Baselines name
    firmware by these. An Id not starting with a letter gets `fw_` in front."""
    name = re.sub(r"[^a-z0-9]+", "_", redfish_id.lower()).strip("_")
    if not name or not name[0].isalpha():
        name = f"fw_{name}"
    return name[:40].rstrip("_")


def firmware_components(items: list[dict]) -> list[Component]:
    """Redfish members → components: `ok` with their version (a member without one is
    `missing`), the Redfish name in `detail`. Ids that fold to one name keep the first."""
    components: dict[str, Component] = {}
    for item in items:
        name = component_name(str(item.get("id") or ""))
        if name in components or len(components) >= MAX_COMPONENTS:
            continue
        version = "".join(ch for ch in str(item.get("version") or "") if ch.isprintable())[:100]
        label = "".join(ch for ch in str(item.get("name") or item.get("id")) if ch.isprintable())
        detail = f"Redfish FirmwareInventory {label}"[:300]
        state = ComponentState.OK if version.strip() else ComponentState.MISSING
        components[name] = Component(component=name, version=version, state=state, detail=detail)
    return list(components.values())


def _due(now: datetime):
    stale = Q(firmware_checked_at__isnull=True) | Q(firmware_checked_at__lt=now - FIRMWARE_REFRESH)
    return (
        NodeBMC.objects.exclude(username_encrypted="")
        .filter(stale)
        .select_related("node")
        .order_by(F("firmware_checked_at").asc(nulls_first=True), "pk")  # never read first
    )


def _read(bmc: NodeBMC):
    try:
        return bmc, redfish.read_firmware_inventory(target_for(bmc)), None
    except CredentialsUnreadable:
        return bmc, None, redfish.BMCError(BMCErrorKind.BAD_CREDENTIALS, "no readable credentials stored")
    except redfish.BMCError as exc:
        return bmc, None, exc


def refresh_firmware_inventories(*, limit: int = FIRMWARE_PER_PASS, now: datetime | None = None) -> dict:
    """Read the firmware inventory of up to `limit` BMCs due for it and store it per node."""
    now = now or timezone.now()
    batch = list(_due(now)[:limit])
    counts = {"firmware_read": 0, "firmware_skipped": 0, "firmware_errors": 0}
    if not batch:
        return counts
    with ThreadPoolExecutor(max_workers=min(FIRMWARE_CONCURRENCY, len(batch))) as pool:
        results = list(pool.map(_read, batch))
    for bmc, items, error in results:
        if error is not None:
            counts["firmware_skipped" if error.kind in SKIPPED_KINDS else "firmware_errors"] += 1
        elif components := firmware_components(items):
            store_software_inventory(node=bmc.node, components=components, observed_at=now, source=InventorySource.BMC)
            counts["firmware_read"] += 1
        else:
            counts["firmware_skipped"] += 1  # the resource is there but lists nothing
    NodeBMC.objects.filter(pk__in=[bmc.pk for bmc in batch]).update(firmware_checked_at=now)
    return counts
