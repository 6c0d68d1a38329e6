"""Sanitisation records (NIST SP 800-88) and the rest of a node's data-handling checklist.

Records are evidence: this module only ever creates them (the model refuses updates and
deletes). They come from two places: an operator entering one with evidence, and the node
agent's `sanitize_drive` results (`record_sanitization_from_agent`).
"""

from datetime import datetime

from django.db import transaction
from django.utils import timezone

from core.services.audit import record_audit
from fleet.choices import AgentAction, CustodyDestination, CustodyKind, SanitizationMethod, SanitizationSource
from fleet.models import (
    CustodyTransfer,
    Drive,
    Node,
    NodeAgentAction,
    NodeDisposal,
    SanitizationRecord,
)

from .drive_gate import CUSTODY, RMA, Basis, gate_status, rule_for
from .lifecycle import record_node_event

MAX_EVIDENCE_CHARS = 20_000


class InvalidSanitizationRecord(ValueError):
    """An agent result that cannot be turned into a record (wrong drive, bad method)."""


def _record_snapshot(record: SanitizationRecord) -> dict:
    return {
        "drive": str(record.drive_id),
        "method": record.method,
        "technique": record.technique,
        "tool": record.tool,
        "verified": record.verified,
        "source": record.source,
    }


@transaction.atomic
def record_sanitization(
    *,
    drive: Drive,
    method: str,
    technique: str,
    tool: str,
    verified: bool,
    evidence: str,
    actor: str,
    source: str = SanitizationSource.OPERATOR,
    performed_at: datetime | None = None,
    node_agent_action: NodeAgentAction | None = None,
) -> SanitizationRecord:
    """Append one drive's sanitisation record and leave an audit event and a node event."""
    if method not in SanitizationMethod.values:
        raise InvalidSanitizationRecord(f"method must be one of {', '.join(SanitizationMethod.values)}")
    record = SanitizationRecord.objects.create(
        drive=drive,
        method=method,
        technique=technique,
        tool=tool,
        verified=verified,
        evidence=evidence[:MAX_EVIDENCE_CHARS],
        actor=actor,
        performed_at=performed_at or timezone.now(),
        source=source,
        node_agent_action=node_agent_action,
    )
    record_audit(
        actor=actor,
        action="sanitization.record",
        target=record,
        after=_record_snapshot(record),
        reason=f"{method} of drive {drive.serial}",
    )
    node = Node.objects.only("id", "lifecycle", "hostname").get(pk=drive.node_id)
    record_node_event(
        node,
        actor=actor,
        action="sanitization_record",
        reason=f"drive {drive.serial}: {method} ({technique}) {'verified' if verified else 'NOT verified'}",
    )
    return record


@transaction.atomic
def record_sanitization_from_agent(action: NodeAgentAction) -> SanitizationRecord | None:
    """Turn a finished `sanitize_drive` agent action into a record (called by the action-results
    handler). Idempotent: a second call for the same action returns the existing record.
    Returns None when the result carries no record (the agent failed before erasing).

    The record's drive is the action's drive; the serial the agent reports must match it, so a
    result can never vouch for a different drive.
    """
    if action.action != AgentAction.SANITIZE_DRIVE:
        raise InvalidSanitizationRecord(f"{action.action} results carry no sanitisation record")
    existing = SanitizationRecord.objects.filter(node_agent_action=action).first()
    if existing:
        return existing
    payload = (action.output or {}).get("sanitization_record")
    if not payload:
        return None
    drive = action.drive or Drive.objects.filter(node_id=action.node_id, serial=payload.get("drive_serial")).first()
    if drive is None:
        raise InvalidSanitizationRecord("the action names no drive and the reported serial is not on this node")
    reported = payload.get("drive_serial") or ""
    if reported and reported != drive.serial:
        raise InvalidSanitizationRecord(f"the agent reported drive {reported} but the action was for {drive.serial}")
    return record_sanitization(
        drive=drive,
        method=payload.get("method", ""),
        technique=str(payload.get("technique", "")),
        tool=str(payload.get("tool", "")),
        verified=payload.get("verified") is True,
        evidence=str(payload.get("evidence", "")),
        actor=f"agent:{action.node_id}",
        source=SanitizationSource.AGENT,
        performed_at=action.finished_at or timezone.now(),
        node_agent_action=action,
    )


def _checklist(node: Node) -> NodeDisposal:
    disposal, _ = NodeDisposal.objects.select_for_update().get_or_create(node=node)
    return disposal


def _stamp_checklist(
    *, node: Node, field: str, action: str, actor: str, reason: str, evidence: dict | None = None
) -> NodeDisposal:
    """Record that one checklist step was done now, by `actor` (audited, on the node's trail)."""
    disposal = _checklist(node)
    previous = getattr(disposal, f"{field}_at")
    setattr(disposal, f"{field}_at", timezone.now())
    setattr(disposal, f"{field}_by", actor)
    fields = [f"{field}_at", f"{field}_by"]
    if evidence is not None:
        setattr(disposal, f"{field}_evidence", evidence)
        fields.append(f"{field}_evidence")
    disposal.save(update_fields=fields)
    record_audit(
        actor=actor,
        action=f"node.{action}",
        target=node,
        before={f"{field}_at": previous.isoformat() if previous else None},
        after={f"{field}_at": getattr(disposal, f"{field}_at").isoformat()},
        reason=reason,
    )
    record_node_event(node, actor=actor, action=action, reason=reason)
    return disposal


@transaction.atomic
def record_bmc_reset(*, node: Node, actor: str, reason: str = "", evidence: dict | None = None) -> NodeDisposal:
    """BMC credentials reset to factory and its logs cleared (part of what must not leave).
    `evidence`: the BMC's answers when Hangar did it over Redfish (fleet.services.bmc_disposal),
    or what the operator says they did by hand."""
    return _stamp_checklist(
        node=node,
        field="bmc_reset",
        action="bmc_reset",
        actor=actor,
        reason=reason or "BMC credentials reset, logs cleared",
        evidence=evidence if evidence is not None else {"method": "recorded by hand", "by": actor, "reason": reason},
    )


@transaction.atomic
def record_asset_tags_removed(*, node: Node, actor: str, reason: str = "") -> NodeDisposal:
    return _stamp_checklist(
        node=node,
        field="asset_tags_removed",
        action="asset_tags_removed",
        actor=actor,
        reason=reason or "asset tags removed",
    )


class CustodyRefused(Exception):
    """A custody transfer that the drive gate refuses. `status` is the gate's answer."""

    code = "sanitization_incomplete"

    def __init__(self, detail: str, status=None, code: str | None = None):
        self.detail = detail
        self.status = status
        if code:
            self.code = code
        super().__init__(detail)


def _drive_snapshot(gate) -> list[dict]:
    """What vouched for each drive when custody passed (kept with the transfer)."""
    return [
        {
            "serial": d.serial,
            "drive_id": d.drive_id,
            "required_method": d.required,
            "record_id": d.record_id,
            "record_method": d.record_method,
        }
        for d in gate.drives
    ]


@transaction.atomic
def record_custody_transfer(
    *,
    node: Node,
    from_party: str,
    to_party: str,
    document_ref: str,
    actor: str,
    destination_kind: str = "",
    at: datetime | None = None,
    kind: str = CustodyKind.DISPOSAL,
    carrier: str = "",
    drive_status: list[dict] | None = None,
) -> CustodyTransfer:
    """Hand the node to the next party, of a named kind (own site or lab, lessee, buyer,
    recycler, destruction vendor, RMA vendor). The method its drives need is derived from that
    kind now (NIST SP 800-88, core/reference/sanitisation.csv) — leaving the organisation's
    control needs a verified purge, or destroy where purge is impossible, for every drive,
    whatever a plan says — and is stored with the transfer together with the record that
    vouched for each drive. An RMA shipment with the drives aboard names the carrier and declares
    every inventoried drive's status instead (the RMA move checks the declaration covers them all)."""
    drive_status = drive_status or []
    now = timezone.now()
    at = at or now
    if at > now:
        raise CustodyRefused(
            "A custody transfer cannot be recorded ahead of time; give when it happened.", code="invalid"
        )
    if kind == CustodyKind.RMA_SHIPMENT:
        destination_kind = destination_kind or CustodyDestination.RMA_VENDOR
        if destination_kind != CustodyDestination.RMA_VENDOR:
            raise CustodyRefused("An RMA shipment goes to the vendor: destination_kind is rma_vendor.", code="invalid")
    if not destination_kind or destination_kind == CustodyDestination.UNSPECIFIED:
        raise CustodyRefused(
            "Name the kind of party the node goes to (own_site, own_lab, lessee, buyer, recycler, "
            "destruction_vendor, rma_vendor): it decides the sanitisation its drives need.",
            code="invalid",
        )
    rule = rule_for(destination_kind)
    if kind == CustodyKind.RMA_SHIPMENT:
        if not carrier.strip():
            raise CustodyRefused("An RMA shipment record names the carrier; add it and retry.")
        gate = gate_status([node.pk], RMA)[node.pk]
        declared = {str(d.get("serial")) for d in drive_status}
        undeclared = [d.serial for d in gate.drives if d.serial not in declared]
        if undeclared or gate.problems and not gate.drives:
            raise CustodyRefused(
                f"Declare the status of every drive the agent reported; missing: {', '.join(undeclared) or 'inventory'}.",
                gate,
            )
    else:
        pending = Basis("pending", destination_kind, f"this transfer to {to_party} ({rule.label})")
        gate = gate_status([node.pk], CUSTODY, {node.pk: pending})[node.pk]
        if not gate.passed:
            raise CustodyRefused(f"{node.hostname} cannot go to {to_party} ({rule.label}) yet: {gate.refusal()}.", gate)
        late = _records_after(gate, at)
        if late:
            raise CustodyRefused(
                f"Custody passed at {at:%Y-%m-%d %H:%M} UTC, before the records that vouch for drive(s) "
                f"{', '.join(late)} were made; a record made after the node left cannot vouch for it.",
                gate,
            )
    transfer = CustodyTransfer.objects.create(
        node=node,
        from_party=from_party,
        to_party=to_party,
        kind=kind,
        carrier=carrier,
        drive_status=drive_status,
        document_ref=document_ref,
        at=at,
        recorded_by=actor,
        destination_kind=destination_kind,
        leaves_organisation=rule.leaves_organisation,
        required_method=rule.minimum_method,
        drives=_drive_snapshot(gate),
    )
    record_audit(
        actor=actor,
        action="node.custody_transfer",
        target=node,
        after={
            "from": from_party,
            "to": to_party,
            "document_ref": document_ref,
            "kind": kind,
            "destination_kind": destination_kind,
            "leaves_organisation": rule.leaves_organisation,
            "required_method": rule.minimum_method,
            "carrier": carrier,
            "drive_status": drive_status,
        },
    )
    record_node_event(
        node,
        actor=actor,
        action="custody_transfer",
        reason=(
            f"{from_party} → {to_party} ({rule.label}, {document_ref}){f' by {carrier}' if carrier else ''}: "
            f"{'leaves the organisation, ' + rule.minimum_method if rule.leaves_organisation else 'stays inside, clear'}"
        ),
    )
    return transfer


def _records_after(gate, at) -> list[str]:
    ids = [d.record_id for d in gate.drives if d.record_id]
    late = set(
        SanitizationRecord.objects.filter(pk__in=ids, performed_at__gt=at).values_list("drive__serial", flat=True)
    )
    return sorted(late)
