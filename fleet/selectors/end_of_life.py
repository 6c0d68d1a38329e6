"""Reads of data handling: which drives hold sanitisation evidence, each node's data-handling
status and the certificate's contents."""

from dataclasses import dataclass

from django.db.models import F, Max, Q

from ..choices import CustodyKind, Lifecycle
from ..models import (
    CustodyTransfer,
    Drive,
    Node,
    NodeDisposal,
    NodeEvent,
    SanitizationRecord,
)
from ..services.drive_gate import (
    DISPOSE,
    METHOD_RANK,
    RETIRE,
    counting_record,
    gate_statuses,
    method_for,
    rule_for,
    transfer_kind,
)


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
    custody_transfers: int  # disposal transfers since the node's last tenant use
    gate: object  # GateStatus for retire (destination and its basis, inventory, per-drive method and record)
    dispose_gate: object  # GateStatus for dispose
    bmc_reset_evidence: dict | None = None  # the BMC's answers (Redfish) or the operator's word

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
            missing.append("no chain-of-custody transfer recorded (naming the party and its kind)")
        return missing


def data_handling_status(node_ids) -> dict:
    """node id → DataHandlingStatus, in a fixed number of queries whatever the number of nodes."""
    node_ids = list(node_ids)
    both = gate_statuses(node_ids, (RETIRE, DISPOSE))
    gates, dispose_gates = both[RETIRE], both[DISPOSE]
    disposals = {d.node_id: d for d in NodeDisposal.objects.filter(node_id__in=node_ids)}
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
            custody_transfers=len(dispose_gates[nid].disposal_transfers),
            gate=gate,
            dispose_gate=dispose_gates[nid],
            bmc_reset_evidence=disposal.bmc_reset_evidence if disposal and disposal.bmc_reset_at else None,
        )
    return out


@dataclass(frozen=True)
class TransferLine:
    """One custody transfer as the certificate states it: where it went and what that needed."""

    transfer: CustodyTransfer
    destination_kind: str
    label: str
    leaves_organisation: bool
    required_method: str  # the kind's minimum (destroy replaces purge for a drive that cannot be purged)
    source: str  # the NIST SP 800-88 rule it follows (sanitisation.csv)


def certificate_refusals(node, status, transfers, records, last_use, events) -> list[str]:
    """Where the transfers, the records and the events disagree, one sentence each; a
    certificate is issued only when there are none.

    - every transfer stored the method its destination kind needs now (sanitisation.csv);
    - every drive had, before custody passed, a verified record with evidence strong enough for
      that transfer's destination, made after the node's last tenant use (an RMA shipment with
      the drives aboard is not sanitisation, so no certificate covers it);
    - the record each transfer names as its drive's voucher is that drive's, verified;
    - a node retired or disposed has the event that put it there; a disposed one, the disposal
      transfer that says where it went.
    """
    refusals: list[str] = []
    by_serial = {d.serial: d for d in status.gate.drives}
    caps = {d.serial: (d.self_encrypting, d.purge_supported) for d in Drive.objects.filter(node=node)}
    by_drive: dict = {}
    for r in records:
        by_drive.setdefault(r.drive.serial, []).append(r)
    record_ids = {str(r.pk): r for r in records}
    for t in transfers:
        kind = transfer_kind(t)
        rule = rule_for(kind)
        where = f"the transfer to {t.to_party} ({rule.label}, {t.at:%Y-%m-%d})"
        if METHOD_RANK[t.required_method] < METHOD_RANK[rule.minimum_method] or (
            rule.leaves_organisation and not t.leaves_organisation
        ):
            refusals.append(
                f"{where} stored {t.required_method}{'' if t.leaves_organisation else ' (inside the organisation)'}, "
                f"but NIST SP 800-88 for {rule.label} needs {rule.minimum_method}"
                f"{' (it leaves the organisation)' if rule.leaves_organisation else ''}"
            )
        if t.kind == CustodyKind.RMA_SHIPMENT:
            refusals.append(
                f"{where} shipped the drives aboard, declared but not sanitised: no certificate of sanitisation "
                "covers them"
            )
            continue
        for serial in sorted(by_serial):
            sed, purgeable = caps.get(serial, (False, False))
            needed = method_for(rule, self_encrypting=sed, purge_supported=purgeable)
            before = [r for r in by_drive.get(serial, []) if r.performed_at <= t.at]
            if counting_record(before, needed, last_use) is None:
                wanted = "purge or destroy" if needed == "purge" else needed
                refusals.append(
                    f"drive {serial} went with {where} without a verified {wanted} record made before custody passed"
                )
        for line in t.drives or []:
            rid = line.get("record_id")
            if rid and (rid not in record_ids or record_ids[rid].drive.serial != line.get("serial")):
                refusals.append(
                    f"{where} names record {rid} for drive {line.get('serial')}, which no verified record of "
                    "that drive matches"
                )
    entered = {state for state in events}
    for state in (Lifecycle.RETIRED, Lifecycle.DISPOSED):
        if node.lifecycle == state or (state == Lifecycle.RETIRED and node.lifecycle == Lifecycle.DISPOSED):
            if state not in entered:
                refusals.append(f"the node is {node.lifecycle}, but no event records it entering {state}")
    if node.lifecycle == Lifecycle.DISPOSED and not status.dispose_gate.disposal_transfers:
        refusals.append("the node is disposed, but no custody transfer says where it went")
    return refusals


def certificate_for(node_id) -> dict:
    """Everything the certificate of sanitisation shows, built from the custody transfers, the
    sanitisation records and the node's events: the node, where it went (each transfer with the
    method its kind needed), every drive (the agent's inventory and the records) with the method
    required, the record that counts and its evidence, the BMC reset, and who signed it off.
    `refusals` lists where those facts disagree; the certificate is issued only when the
    retire checklist is complete and there are none. Raises Node.DoesNotExist."""

    node = Node.objects.select_related("node_type", "rack__hall__site").get(pk=node_id)
    status = data_handling_status([node.pk])[node.pk]
    drives = {str(d.pk): d for d in Drive.objects.filter(node=node)}
    records = list(
        SanitizationRecord.objects.filter(drive__node=node, verified=True)
        .select_related("drive")
        .order_by("performed_at", "id")
    )
    by_id = {str(r.pk): r for r in records}
    rows = [(line, drives.get(line.drive_id), by_id.get(line.record_id)) for line in status.gate.drives]
    disposal = NodeDisposal.objects.filter(node=node).first()
    in_window = {b.transfer_id for b in status.dispose_gate.basis if b.transfer_id}
    custody = list(CustodyTransfer.objects.filter(node=node).order_by("at", "id"))
    transfers = [t for t in custody if str(t.pk) in in_window]
    last_use = NodeEvent.objects.filter(node=node).aggregate(
        used=Max("at", filter=Q(from_state=Lifecycle.ACTIVE) & ~Q(to_state=Lifecycle.ACTIVE))
    )["used"]
    events = set(
        NodeEvent.objects.filter(node=node, to_state__in=(Lifecycle.RETIRED, Lifecycle.DISPOSED))
        .exclude(from_state=F("to_state"))
        .values_list("to_state", flat=True)
    )
    refusals = certificate_refusals(node, status, transfers, records, last_use, events)
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
    lines = []
    for t in custody:
        rule = rule_for(transfer_kind(t))
        lines.append(
            TransferLine(
                transfer=t,
                destination_kind=rule.destination_kind,
                label=rule.label,
                leaves_organisation=rule.leaves_organisation,
                required_method=rule.minimum_method,
                source=rule.source,
            )
        )
    return {
        "node": node,
        "rows": rows,
        "disposal": disposal,
        "status": status,
        "gate": status.gate,
        "custody": lines,
        "refusals": refusals,
        "complete": not status.retire_missing and not refusals,
        "signed_off_by": signed_off_by or "(not signed off)",
        "signed_off_at": signed_off_at,
    }


# --- node lifecycle reads (ops API, console node pages, allocation loop) -------------------
