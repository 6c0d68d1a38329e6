"""Planning and applying an import: `plan_import()` answers, `apply_import()` plans again under
locks inside one transaction and writes only a clean plan."""

from collections import defaultdict

from django.db import IntegrityError, transaction
from django.utils import timezone

from core.context import current_request_id
from core.netguard import origin_of
from core.search import index_objects
from core.services.audit import AuditEntry, record_audits
from fleet.choices import Lifecycle
from fleet.inventory_files import Workbook
from fleet.models import (
    GPU,
    Drive,
    Node,
    NodeBMC,
    NodeEvent,
    Rack,
)

from .columns import UPDATABLE, ImportPlan, ImportRejected, RowError
from .sheets import Planner


def plan_import(workbook: Workbook, *, allow_updates: set[str] = frozenset()) -> ImportPlan:
    """What importing `workbook` would do now (reads only)."""
    return Planner(workbook, allow_updates=set(allow_updates) & UPDATABLE, lock=False).run()


def apply_import(
    workbook: Workbook, *, allow_updates: set[str] = frozenset(), actor: str, expected: dict | None = None
) -> ImportPlan:
    """Plan again under lock and write everything, or raise ImportRejected and write nothing.
    `expected` is the preview's `ImportPlan.snapshot()`: a row whose stored values changed since
    then is refused rather than overwritten with the file's value."""
    try:
        with transaction.atomic():
            plan = Planner(workbook, allow_updates=set(allow_updates) & UPDATABLE, lock=True, expected=expected).run()
            if not plan.ok:
                raise ImportRejected(plan)
            _write(plan, actor=actor)
    except IntegrityError:
        plan = ImportPlan(
            errors=[
                RowError(
                    "",
                    0,
                    "",
                    "",
                    (
                        "The inventory changed while the import ran (another user added a node, rack or serial from this file); "
                        "nothing was imported. Upload the file again to see the current problems."
                    ),
                )
            ]
        )
        raise ImportRejected(plan) from None
    return plan


def _write(plan: ImportPlan, *, actor: str) -> None:
    now = timezone.now()
    request_id = current_request_id()
    Rack.objects.bulk_create(plan.new_racks, batch_size=1000)
    audits: list[AuditEntry] = []
    events: list[NodeEvent] = []
    for instance, fields, diff in plan.updates:
        instance.save(update_fields=[*fields, "updated_at"])
        label = type(instance)._meta.model_name
        audits.append(
            AuditEntry(
                f"{label}.import_update",
                instance,
                before={k: a for k, (a, _) in diff.items()},
                after={k: b for k, (_, b) in diff.items()},
                reason="admin import",
            )
        )
        if isinstance(instance, Node):
            events.append(
                NodeEvent(
                    node_id=instance.pk,
                    at=now,
                    actor=actor,
                    action="inventory_update",
                    from_state=instance.lifecycle,
                    to_state=instance.lifecycle,
                    reason="admin import: " + ", ".join(f"{k} {a} → {b}" for k, (a, b) in diff.items()),
                    request_id=request_id,
                )
            )
    Node.objects.bulk_create(plan.new_nodes, batch_size=1000)
    GPU.objects.bulk_create(plan.new_gpus, batch_size=2000)
    Drive.objects.bulk_create(plan.new_drives, batch_size=2000)
    # bulk_create sends no post_save: the new rows' identifiers go to the search index here
    # (the updates above saved one by one, and their signals did it)
    index_objects([*plan.new_racks, *plan.new_nodes, *plan.new_gpus, *plan.new_drives], created=True)
    gpus_by_node: dict = defaultdict(list)
    for gpu in plan.new_gpus:
        gpus_by_node[gpu.node_id].append(gpu.uuid)
    drives_by_node: dict = defaultdict(list)
    for drive in plan.new_drives:
        drives_by_node[drive.node_id].append(drive.serial)
    for rack in plan.new_racks:
        audits.append(
            AuditEntry(
                "rack.import_create",
                rack,
                after={
                    "name": rack.name,
                    "hall": str(rack.hall),
                    "row": rack.row,
                    "column": rack.column,
                    "u_height": rack.u_height,
                    "rated_power_kw": str(rack.rated_power_kw),
                    "cooling": rack.cooling,
                    "cooling_capacity_kw": str(rack.cooling_capacity_kw),
                },
                reason="admin import",
            )
        )
    bmc_given = {node.pk: bmc for node, bmc in plan.bmcs}
    audits += _write_bmcs(plan.bmcs)
    new_ids = set()
    for node in plan.new_nodes:
        new_ids.add(node.pk)
        events.append(
            NodeEvent(
                node_id=node.pk,
                at=now,
                actor=actor,
                action="enrol",
                from_state="",
                to_state=Lifecycle.ENROLLED,
                reason="enrolled by admin import",
                request_id=request_id,
            )
        )
        audits.append(
            AuditEntry(
                "node.import_create",
                node,
                after={
                    "hostname": node.hostname,
                    "serial": node.serial,
                    "rack": node.rack.name,
                    "u_position": node.u_position,
                    "node_type": node.node_type.slug,
                    "fabric_domain": node.fabric_domain.name if node.fabric_domain else None,
                    "bmc_address": bmc_given.get(node.pk, {}).get("address"),
                    "gpus": gpus_by_node.get(node.pk, []),
                    "drives": drives_by_node.get(node.pk, []),
                },
                reason="admin import",
            )
        )
    # hardware added to nodes that were already in the inventory
    for node_id in (set(gpus_by_node) | set(drives_by_node)) - new_ids:
        node = next(g.node for g in plan.new_gpus + plan.new_drives if g.node_id == node_id)
        audits.append(
            AuditEntry(
                "node.import_hardware",
                node,
                after={"gpus": gpus_by_node.get(node_id, []), "drives": drives_by_node.get(node_id, [])},
                reason="admin import",
            )
        )
    NodeEvent.objects.bulk_create(events, batch_size=2000)
    record_audits(actor=actor, entries=audits)


def _write_bmcs(rows: list) -> list[AuditEntry]:
    """The BMC address and MAC the file gives, on each node's BMC record (created where the node
    has none). A changed address moves the record's Redfish URL to it and clears the stored
    credentials: they were entered for the old address and are never sent to another."""
    if not rows:
        return []
    records = {b.node_id: b for b in NodeBMC.objects.select_for_update().filter(node_id__in=[n.pk for n, _ in rows])}
    now = timezone.now()
    created, changed, audits = [], [], []
    for node, given in rows:
        record = records.get(node.pk)
        if record is None:
            record = NodeBMC(node=node, **given)
            created.append(record)
            audits.append(
                AuditEntry("node.bmc_import", node, after={**given, "credentials_set": False}, reason="admin import")
            )
            continue
        before = {"address": record.address, "mac": record.mac, "redfish_url": record.redfish_url}
        moved = "address" in given and given["address"] != record.address
        for attr, value in given.items():
            setattr(record, attr, value)
        cleared = False
        if moved and record.redfish_url:
            parts = record.redfish_url.split("://", 1)
            port = origin_of(record.redfish_url).rsplit(":", 1)[1]
            host = f"[{record.address}]" if ":" in record.address else record.address
            record.redfish_url = f"{parts[0]}://{host}:{port}"
            record.reachable, record.last_error, record.last_error_kind = None, "", ""
        if moved and (record.username_encrypted or record.password_encrypted):
            record.username_encrypted = record.password_encrypted = record.credentials_origin = ""
            record.credentials_changed_at = now
            cleared = True
        record.updated_at = now
        changed.append(record)
        audits.append(
            AuditEntry(
                "node.bmc_import",
                node,
                before=before,
                after={
                    "address": record.address,
                    "mac": record.mac,
                    "redfish_url": record.redfish_url,
                    "credentials_cleared": cleared,
                },
                reason="admin import",
            )
        )
    NodeBMC.objects.bulk_create(created, batch_size=1000)
    NodeBMC.objects.bulk_update(
        changed,
        [
            "address",
            "mac",
            "redfish_url",
            "username_encrypted",
            "password_encrypted",
            "credentials_origin",
            "credentials_changed_at",
            "reachable",
            "last_error",
            "last_error_kind",
            "updated_at",
        ],
        batch_size=1000,
    )
    index_objects(created, created=True)
    index_objects(changed)
    return audits


# ---- the file between preview and confirm --------------------------------------------------
# The previewed bytes are kept server-side (never round-tripped through the browser) under an
# unguessable id bound to the user; confirming claims them with an atomic rename, so a double
# submit applies the import once and the second answers that it was already used.
