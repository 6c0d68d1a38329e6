"""Reads of data handling: which drives hold sanitisation evidence, each node's data-handling
status and the certificate's contents."""

from dataclasses import dataclass

from django.db.models import (
    Count,
)

from ..choices import Lifecycle
from ..models import (
    CustodyTransfer,
    Drive,
    Node,
    NodeDisposal,
    NodeEvent,
    SanitizationRecord,
)
from ..services.drive_gate import DISPOSE, RETIRE, gate_statuses


def sanitized_drive_ids(drive_ids) -> set:
    """The drives among `drive_ids` that have a passing (verified) sanitisation record."""

    return set(
        SanitizationRecord.objects.filter(drive_id__in=list(drive_ids), verified=True)
        .values_list("drive_id", flat=True)
        .distinct()
    )


@dataclass(frozen=True)
class DataHandlingStatus:
    """Where a node stands on everything that gates it leaving (retire, dispose): the drive
    gate (fleet.services.drive_gate) for retire and for dispose, plus the checklist."""

    drives_total: int
    drives_sanitized: int
    unsanitized: list[dict]  # [{"id", "serial", "required_method", "problem"}] of drives the gate does not pass
    bmc_reset_at: object
    asset_tags_removed_at: object
    custody_transfers: int
    gate: object  # GateStatus for retire (destination, inventory, per-drive method and record)
    dispose_gate: object  # GateStatus for dispose

    @property
    def drives_done(self) -> bool:
        return self.gate.passed

    @property
    def retire_missing(self) -> list[str]:
        missing = list(self.gate.missing)
        if self.bmc_reset_at is None:
            missing.append("BMC reset (credentials reset, logs cleared) not recorded")
        return missing

    @property
    def dispose_missing(self) -> list[str]:
        missing = list(self.dispose_gate.missing)
        if self.asset_tags_removed_at is None:
            missing.append("asset tags not recorded as removed")
        if not self.custody_transfers:
            missing.append("no chain-of-custody transfer recorded")
        return missing


def data_handling_status(node_ids) -> dict:
    """node id → DataHandlingStatus, in a fixed number of queries whatever the number of nodes."""
    node_ids = list(node_ids)
    both = gate_statuses(node_ids, (RETIRE, DISPOSE))
    gates, dispose_gates = both[RETIRE], both[DISPOSE]
    disposals = {d.node_id: d for d in NodeDisposal.objects.filter(node_id__in=node_ids)}
    custody = dict(
        CustodyTransfer.objects.filter(node_id__in=node_ids)
        .values("node_id")
        .annotate(n=Count("id"))
        .values_list("node_id", "n")
    )
    out = {}
    for nid in node_ids:
        gate = gates[nid]
        disposal = disposals.get(nid)
        out[nid] = DataHandlingStatus(
            drives_total=len(gate.drives),
            drives_sanitized=sum(1 for d in gate.drives if d.ok),
            unsanitized=[
                {"id": d.drive_id, "serial": d.serial, "required_method": d.required, "problem": d.problem}
                for d in gate.drives
                if not d.ok
            ],
            bmc_reset_at=disposal.bmc_reset_at if disposal else None,
            asset_tags_removed_at=disposal.asset_tags_removed_at if disposal else None,
            custody_transfers=custody.get(nid, 0),
            gate=gate,
            dispose_gate=dispose_gates[nid],
        )
    return out


def certificate_for(node_id) -> dict:
    """Everything the certificate of sanitisation shows: the node, the destination, every drive
    (the agent's inventory and the records) with the method required, the record that counts
    and its evidence, the BMC reset and the chain of custody. Raises Node.DoesNotExist."""

    node = Node.objects.select_related("node_type", "rack__hall__site").get(pk=node_id)
    status = data_handling_status([node.pk])[node.pk]
    drives = {str(d.pk): d for d in Drive.objects.filter(node=node)}
    records = {str(r.pk): r for r in SanitizationRecord.objects.filter(drive__node=node, verified=True)}
    rows = [(line, drives.get(line.drive_id), records.get(line.record_id)) for line in status.gate.drives]
    disposal = NodeDisposal.objects.filter(node=node).first()
    custody = list(CustodyTransfer.objects.filter(node=node).order_by("at", "id"))
    # The named person who signed the node off: whoever retired it (or, before that, reset its BMC).
    retired = (
        NodeEvent.objects.filter(node=node, to_state=Lifecycle.RETIRED)
        .exclude(from_state=Lifecycle.RETIRED)
        .order_by("-at")
        .values_list("actor", "at")
        .first()
    )
    signed_off_by, signed_off_at = retired or (
        (disposal.bmc_reset_by, disposal.bmc_reset_at) if disposal else ("", None)
    )
    return {
        "node": node,
        "rows": rows,
        "disposal": disposal,
        "status": status,
        "gate": status.gate,
        "custody": custody,
        "complete": not status.retire_missing,
        "signed_off_by": signed_off_by or "(not signed off)",
        "signed_off_at": signed_off_at,
    }


# --- node lifecycle reads (ops API, console node pages, allocation loop) -------------------
