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

from .agent_actions import request_agent_action
from .lifecycle import transition
from .node_actions import ActionRefused, NodeAction, register

SANITIZE_REASON = "NIST SP 800-88 sanitisation before the node leaves"


def sanitize_params(drive: Drive) -> dict:
    """What the agent runs for one drive: purge by cryptographic erase where the drive encrypts
    everything it stores (the key is destroyed), a user-data erase (clear) otherwise."""
    method = "purge" if drive.self_encrypting else "clear"
    device = f"/dev/disk/by-id/nvme-{drive.model.replace(' ', '_')}_{drive.serial}"
    return {"device": device, "serial": drive.serial, "method": method}


@register
class Sanitize(NodeAction):
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


@register
class Retire(NodeAction):
    name = "retire"
    label = "Retire"
    allowed_states = frozenset({Lifecycle.SANITIZING})

    def execute(self, node: Node, *, actor: str, reason: str) -> Node:
        status = data_handling_status([node.pk])[node.pk]
        if status.retire_missing:
            raise ActionRefused(
                "sanitization_incomplete",
                f"{node.hostname} cannot be retired yet: {len(status.unsanitized)} of {status.drives_total} drives "
                f"lack a passing sanitisation record"
                f"{' and the BMC reset is not recorded' if status.bmc_reset_at is None else ''}. "
                "Run sanitize again or record the sanitisation with evidence, then retry.",
                extra={"drives": status.unsanitized, "missing": status.retire_missing},
            )
        node = transition(node, Lifecycle.RETIRED, actor=actor, action=self.name, reason=reason)
        record_audit(actor=actor, action="node.retire", target=node, before={"lifecycle": Lifecycle.SANITIZING},
                     after={"lifecycle": Lifecycle.RETIRED}, reason=reason)
        return node


@register
class Dispose(NodeAction):
    name = "dispose"
    label = "Dispose"
    allowed_states = frozenset({Lifecycle.RETIRED})

    def execute(self, node: Node, *, actor: str, reason: str) -> Node:
        status = data_handling_status([node.pk])[node.pk]
        if status.dispose_missing:
            raise ActionRefused(
                "disposal_incomplete",
                f"{node.hostname} cannot be disposed yet: {'; '.join(status.dispose_missing)}. "
                "Record them (asset-tags-removed, custody-transfers), then retry.",
                extra={"missing": status.dispose_missing},
            )
        node = transition(node, Lifecycle.DISPOSED, actor=actor, action=self.name, reason=reason)
        record_audit(actor=actor, action="node.dispose", target=node, before={"lifecycle": Lifecycle.RETIRED},
                     after={"lifecycle": Lifecycle.DISPOSED}, reason=reason)
        return node
