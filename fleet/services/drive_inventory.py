"""Drive inventory from the node agent: what the machine really holds, reconciled with Drive rows.

The agent lists the drives it sees (serial, model, size, self-encrypting, purgeable) in its
health report. Reconciling it: a drive seen for the first time gets a Drive row; a row the
agent no longer lists is flagged `missing_since` (never deleted: it may hold tenant data
somewhere); a serial registered to another node is left alone and becomes a disagreement the
drive gate refuses on. The report itself is kept (NodeDriveInventory) so that the gate can
tell when the agent last counted and whether the rows still agree with what it counted.
"""

from datetime import datetime

from django.db import router, transaction

from core.bulk import update_rows
from core.search import index_objects
from fleet.choices import DriveInterface
from fleet.models import Drive, Node, NodeDriveInventory

from .lifecycle import record_node_event

MAX_DRIVES = 64  # far above any GPU server (GB200 trays carry 8 E1.S bays)
MAX_CAPACITY_GB = 1_000_000


# No savepoint of its own when nested: its one caller (the health report's ingest) fails the whole
# report on any error anyway, and the SAVEPOINT/RELEASE pair was two of a report's round trips.
@transaction.atomic(savepoint=False)
def reconcile_drive_inventory(*, node_id, drives: list[dict], observed_at: datetime, now: datetime) -> dict:
    """Apply one agent inventory. Returns {"added", "missing", "returned", "elsewhere"} serials.
    An inventory older than the one stored is ignored (reports can arrive out of order)."""
    observed_at = min(observed_at, now)  # a clock ahead of ours cannot make an inventory look fresher
    node = Node.objects.select_for_update().only("id", "hostname", "lifecycle").get(pk=node_id)
    stored = NodeDriveInventory.objects.filter(node=node).first()
    if stored is not None and stored.reported_at > observed_at:
        return {"added": [], "missing": [], "returned": [], "elsewhere": [], "ignored": True}
    reported = {d["serial"]: d for d in drives}
    mine = {d.serial: d for d in Drive.objects.filter(node=node)}
    elsewhere = set(Drive.objects.filter(serial__in=list(reported)).exclude(node=node).values_list("serial", flat=True))
    added, returned, missing, changed = [], [], [], []
    for serial, info in reported.items():
        if serial in elsewhere:
            continue
        row = mine.get(serial)
        if row is None:
            added.append(
                Drive(
                    node=node,
                    serial=serial,
                    model=info.get("model") or "unknown",
                    capacity_gb=info.get("capacity_gb") or 0,
                    interface=info.get("interface") or DriveInterface.NVME,
                    self_encrypting=bool(info.get("self_encrypting")),
                    purge_supported=bool(info.get("purge_supported")),
                    last_reported_at=observed_at,
                )
            )
            continue
        if row.missing_since is not None:
            returned.append(serial)
        row.last_reported_at, row.missing_since = observed_at, None
        # The agent reads capabilities from the drive itself; they override what was typed in.
        row.self_encrypting = bool(info.get("self_encrypting"))
        row.purge_supported = bool(info.get("purge_supported"))
        if info.get("model"):
            row.model = info["model"]
        if info.get("capacity_gb"):
            row.capacity_gb = info["capacity_gb"]
        changed.append(row)
    for serial, row in mine.items():
        if serial not in reported and row.missing_since is None:
            row.missing_since = observed_at
            missing.append(serial)
            changed.append(row)
    Drive.objects.bulk_create(added)
    index_objects(added, created=True)  # bulk_create sends no post_save; the update below moves no serial
    update_rows(
        Drive,
        changed,
        ["last_reported_at", "missing_since", "self_encrypting", "purge_supported", "model", "capacity_gb"],
        using=router.db_for_write(Drive),
    )
    # `stored` was read under the node's row lock, so no other report can have created it since:
    # one INSERT or UPDATE, not update_or_create's savepoint, second read and write.
    if stored is None:
        NodeDriveInventory.objects.create(node=node, reported_at=observed_at, drives=list(reported.values()))
    else:
        NodeDriveInventory.objects.filter(pk=stored.pk).update(reported_at=observed_at, drives=list(reported.values()))
    notes = []
    if added:
        notes.append(f"new drive(s) {', '.join(d.serial for d in added)}")
    if returned:
        notes.append(f"drive(s) back {', '.join(returned)}")
    if missing:
        notes.append(f"drive(s) MISSING {', '.join(missing)}")
    if elsewhere:
        notes.append(f"drive(s) registered to another node {', '.join(sorted(elsewhere))}")
    if notes:
        record_node_event(node, actor=f"agent:{node.pk}", action="drive_inventory", reason="; ".join(notes))
    return {
        "added": [d.serial for d in added],
        "missing": missing,
        "returned": returned,
        "elsewhere": sorted(elsewhere),
    }
