"""End-of-life node actions: sanitize, retire, dispose (API.md `POST /nodes/{id}/actions`).

No node leaves before its data is handled: `retire` is refused while any drive lacks a passing
sanitisation record or the BMC reset is not recorded, and `dispose` while asset tags or the
chain of custody are missing. Registered with the action framework on app start-up
(`fleet.apps`).
"""
from core.services.audit import record_audit
from fleet.choices import AgentAction, Lifecycle
from fleet.models import Drive, Node
from fleet.selectors import data_handling_status, sanitized_drive_ids

from .action_base import ActionRefused, OperatorAction
from .agent_work import request_agent_action
from .lifecycle import transition

SANITIZE_REASON = "NIST SP 800-88 sanitisation before the node leaves"


def sanitize_params(drive: Drive) -> dict:
    """What the agent runs for one drive: purge by cryptographic erase where the drive encrypts
    everything it stores (the key is destroyed), a user-data erase (clear) otherwise."""
    method = "purge" if drive.self_encrypting else "clear"
    device = f"/dev/disk/by-id/nvme-{drive.model.replace(' ', '_')}_{drive.serial}"
    return {"device": device, "serial": drive.serial, "method": method}


class Sanitize(OperatorAction):
    """decommissioning → sanitizing, queueing one `sanitize_drive` per drive. From sanitizing it
    re-queues only the drives still lacking a passing record (a retry after a failed erase)."""

    name = "sanitize"
    label = "Sanitise drives"
    allowed_states = frozenset({Lifecycle.DECOMMISSIONING, Lifecycle.SANITIZING})

    def execute(self, node: Node, *, actor: str, reason: str) -> Node:
        if node.lifecycle == Lifecycle.DECOMMISSIONING:
            node = transition(node, Lifecycle.SANITIZING, actor=actor, action=self.name, reason=reason or SANITIZE_REASON)
        drives = list(Drive.objects.filter(node=node).order_by("serial"))
        done = sanitized_drive_ids(d.pk for d in drives)
        queued = [request_agent_action(node=node, action=AgentAction.SANITIZE_DRIVE, actor=actor, drive=d,
                                       params=sanitize_params(d), reason=reason or SANITIZE_REASON).pk
                  for d in drives if d.pk not in done]
        record_audit(actor=actor, action="node.sanitize", target=node, after={"queued_drive_actions": len(queued)},
                     reason=reason)
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
        record_audit(actor=actor, action=f"node.{self.name}", target=node, before={"lifecycle": before},
                     after={"lifecycle": self.to_state}, reason=reason)
        return node


class Retire(GatedMove):
    name = "retire"
    label = "Retire"
    allowed_states = frozenset({Lifecycle.SANITIZING})
    to_state = Lifecycle.RETIRED

    def missing(self, status) -> list[str]:
        return status.retire_missing

    def checklist_refusal(self, node: Node, status) -> ActionRefused:
        return ActionRefused(
            "sanitization_incomplete",
            f"{node.hostname} cannot be retired yet: {len(status.unsanitized)} of {status.drives_total} drives "
            f"lack a passing sanitisation record"
            f"{' and the BMC reset is not recorded' if status.bmc_reset_at is None else ''}. "
            "Run sanitize again or record the sanitisation with evidence, then retry.",
            extra={"drives": status.unsanitized, "missing": status.retire_missing},
        )


class Dispose(GatedMove):
    name = "dispose"
    label = "Dispose"
    allowed_states = frozenset({Lifecycle.RETIRED})
    to_state = Lifecycle.DISPOSED

    def missing(self, status) -> list[str]:
        return status.dispose_missing

    def checklist_refusal(self, node: Node, status) -> ActionRefused:
        return ActionRefused(
            "disposal_incomplete",
            f"{node.hostname} cannot be disposed yet: {'; '.join(status.dispose_missing)}. "
            "Record them (asset-tags-removed, custody-transfers), then retry.",
            extra={"missing": status.dispose_missing},
        )
