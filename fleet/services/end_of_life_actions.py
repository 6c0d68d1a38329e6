"""End-of-life node actions: sanitize, retire, dispose (docs/api.md `POST /nodes/{id}/actions`).

No node leaves before its data is handled. The drive gate (fleet.services.drive_gate, run by
`transition()` itself for rma, retired and disposed) wants the agent's fresh inventory and,
for every drive, a verified record with evidence of the method where the hardware goes needs —
re-checked against the custody transfers actually made, never lowered by a plan; on top of it
`retire` wants the BMC reset and `dispose` the asset tags and a custody transfer naming the party.
Registered with the action framework on app start-up (`fleet.apps`).
"""

from core.services.audit import record_audit
from fleet.choices import AgentAction, Lifecycle, SanitizationMethod
from fleet.models import Drive, Node
from fleet.selectors import data_handling_status

from .action_base import ActionRefused, OperatorAction
from .agent_work import request_agent_action
from .drive_gate import RETIRE, RMA, gate_status
from .lifecycle import transition

SANITIZE_REASON = "NIST SP 800-88 sanitisation before the node leaves"
AGENT_METHODS = frozenset({SanitizationMethod.CLEAR, SanitizationMethod.PURGE})  # destroy is physical


def sanitize_params(drive: Drive, method: str) -> dict:
    """What the agent runs for one drive, by the method its destination requires: purge (a
    cryptographic or block erase) or clear (a user-data erase)."""
    device = f"/dev/disk/by-id/nvme-{drive.model.replace(' ', '_')}_{drive.serial}"
    return {"device": device, "serial": drive.serial, "method": method}


class Sanitize(OperatorAction):
    """decommissioning → sanitizing, queueing one `sanitize_drive` per drive with the method its
    destination requires (shown before it starts: `GET /nodes/{id}/data-handling`). From
    sanitizing it re-queues only the drives the gate does not pass yet; from triage (a node
    going for RMA) it queues without a move. Drives that must be destroyed are not queued: an
    operator records their destruction with evidence."""

    name = "sanitize"
    label = "Sanitise drives"
    consequence = "erases every drive of the node (NIST SP 800-88): nothing on them can be recovered"
    refuses_allocated = True
    allowed_states = frozenset({Lifecycle.DECOMMISSIONING, Lifecycle.SANITIZING, Lifecycle.TRIAGE})

    def execute(self, node: Node, *, actor: str, reason: str) -> Node:
        if node.lifecycle == Lifecycle.DECOMMISSIONING:
            node = transition(
                node, Lifecycle.SANITIZING, actor=actor, action=self.name, reason=reason or SANITIZE_REASON
            )
        gate = gate_status([node.pk], RMA if node.lifecycle == Lifecycle.TRIAGE else RETIRE)[node.pk]
        drives = {str(d.pk): d for d in Drive.objects.filter(node=node, missing_since__isnull=True)}
        todo = [
            (drives[line.drive_id], line.required)
            for line in gate.drives
            if line.record_id is None and line.drive_id in drives
        ]
        queued = [
            request_agent_action(
                node=node,
                action=AgentAction.SANITIZE_DRIVE,
                actor=actor,
                drive=d,
                params=sanitize_params(d, method),
                reason=reason or SANITIZE_REASON,
            ).pk
            for d, method in todo
            if method in AGENT_METHODS
        ]
        to_destroy = [d.serial for d, method in todo if method not in AGENT_METHODS]
        record_audit(
            actor=actor,
            action="node.sanitize",
            target=node,
            after={"destination": gate.destination, "queued_drive_actions": len(queued), "to_destroy": to_destroy},
            reason=reason,
        )
        return node


class GatedMove(OperatorAction):
    """One end-of-life move that the data-handling checklist must allow first."""

    to_state: str
    refusal_code: str

    def missing(self, status) -> list[str]:  # pragma: no cover - abstract
        raise NotImplementedError

    def checklist_refusal(self, node: Node, status) -> ActionRefused:  # pragma: no cover - abstract
        raise NotImplementedError

    def execute(self, node: Node, *, actor: str, reason: str) -> Node:
        status = data_handling_status([node.pk])[node.pk]
        if self.missing(status):
            raise self.checklist_refusal(node, status)
        before = node.lifecycle
        node = transition(node, self.to_state, actor=actor, action=self.name, reason=reason)
        record_audit(
            actor=actor,
            action=f"node.{self.name}",
            target=node,
            before={"lifecycle": before},
            after={"lifecycle": self.to_state},
            reason=reason,
        )
        return node


class Retire(GatedMove):
    name = "retire"
    label = "Retire"
    consequence = "retires the node: it never returns to service (only disposal follows)"
    refuses_allocated = True
    allowed_states = frozenset({Lifecycle.SANITIZING})
    to_state = Lifecycle.RETIRED

    def missing(self, status) -> list[str]:
        return status.retire_missing

    def checklist_refusal(self, node: Node, status) -> ActionRefused:
        return ActionRefused(
            "sanitization_incomplete",
            f"{node.hostname} cannot be retired yet: {_open_items(status.gate, status.retire_missing)}. "
            "Run sanitize again or record each drive's sanitisation with evidence, then retry.",
            extra={
                "drives": status.unsanitized,
                "lacking_drives": [d.serial for d in status.gate.lacking],
                "missing": status.retire_missing,
                "destination": status.gate.destination,
                "basis": [b.as_dict() for b in status.gate.basis],
            },
        )


class Dispose(GatedMove):
    name = "dispose"
    label = "Dispose"
    consequence = "records the node as gone: handed to the party named in its custody record"
    refuses_allocated = True
    allowed_states = frozenset({Lifecycle.RETIRED})
    to_state = Lifecycle.DISPOSED

    def missing(self, status) -> list[str]:
        return status.dispose_missing

    def checklist_refusal(self, node: Node, status) -> ActionRefused:
        gate = status.dispose_gate
        return ActionRefused(
            "sanitization_incomplete" if gate.lacking else "disposal_incomplete",
            f"{node.hostname} cannot be disposed yet: {_open_items(gate, status.dispose_missing)}. "
            "Record them (drive sanitisation, asset-tags-removed, custody-transfers), then retry.",
            extra={
                "missing": status.dispose_missing,
                "lacking_drives": [d.serial for d in gate.lacking],
                "drives": [d.as_dict() for d in gate.lacking],
                "destination": gate.destination,
                "basis": [b.as_dict() for b in gate.basis],
            },
        )


def _open_items(gate, missing: list[str]) -> str:
    """The gate's refusal (every drive lacking its record named) and the checklist's other items."""
    rest = [m for m in missing if m not in gate.missing]
    return "; ".join([p for p in (gate.refusal(),) if p] + rest)
