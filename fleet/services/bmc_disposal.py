"""The disposition checklist's BMC reset, done over Redfish: `#Manager.ResetToDefaults`
(ResetAll) wipes the BMC's accounts, network settings and logs before the node leaves, and
the BMC's answer is kept as the step's evidence. Hangar's stored credentials for that BMC no
longer open anything afterwards, so they are scrubbed too.

A BMC that refuses or cannot do it (the emulator offers no such action) leaves the step open:
the refusal is on the node's trail, and the operator resets the BMC by hand and records it
with its evidence (`manual`)."""

from django.db import transaction
from django.utils import timezone

from core.services.audit import record_audit
from fleet.models import Node, NodeBMC, NodeDisposal

from . import bmc as redfish
from .action_base import ActionRefused
from .bmc_credentials import CredentialsUnreadable, target_for
from .lifecycle import record_node_event
from .sanitization import record_bmc_reset


class BMCResetFailed(ActionRefused):
    def __init__(self, node: Node, detail: str, kind: str):
        super().__init__(
            "bmc_reset_failed",
            f"{node.hostname}: the BMC reset over Redfish did not happen: {detail} Reset it by hand, then record it "
            "with its evidence (POST /api/v1/ops/nodes/{id}/bmc-reset with manual: true).",
            extra={"bmc_error_kind": kind},
        )


def reset_bmc_for_disposal(*, node: Node, actor: str, reason: str = "", manual: bool = False):
    """Reset the node's BMC to factory defaults through Redfish and record it with the BMC's
    answer; with `manual`, or for a node without a BMC record, record an operator's reset."""
    bmc = NodeBMC.objects.filter(node=node).first()
    if manual or bmc is None or not bmc.has_credentials:
        with transaction.atomic():
            return record_bmc_reset(
                node=node,
                actor=actor,
                reason=reason,
                evidence={"method": "recorded by hand", "by": actor, "reason": reason},
            )
    done = NodeDisposal.objects.filter(node=node, bmc_reset_at__isnull=False).first()
    if done is not None and done.bmc_reset_evidence.get("method") == "redfish":
        return done  # asked again (a retry): the BMC was already reset, and our credentials are gone
    at = timezone.now()
    try:
        answer = redfish.reset_bmc_to_defaults(target_for(bmc))
    except (redfish.BMCError, CredentialsUnreadable) as exc:
        kind = getattr(exc, "kind", "bad_credentials")
        detail = getattr(exc, "detail", str(exc))
        with transaction.atomic():
            NodeBMC.objects.filter(pk=bmc.pk).update(last_error=detail, last_error_kind=kind, last_error_at=at)
            record_node_event(node, actor=actor, action="bmc_reset_failed", reason=detail)
            record_audit(
                actor=actor,
                action="node.bmc_reset_failed",
                target=node,
                after={"redfish_url": bmc.redfish_url, "kind": kind, "detail": detail},
                reason=reason,
            )
        raise BMCResetFailed(node, detail, kind) from None
    evidence = {
        "method": "redfish",
        "action": answer.reset_type,
        "bmc": bmc.redfish_url,
        "response": answer.response,
        "at": at.isoformat(),
        "credentials_scrubbed": True,
    }
    with transaction.atomic():
        disposal = record_bmc_reset(
            node=node, actor=actor, reason=reason or "BMC reset to factory defaults", evidence=evidence
        )
        # The factory accounts replaced ours: what Hangar stored opens nothing now; drop it.
        NodeBMC.objects.filter(pk=bmc.pk).update(
            username_encrypted="", password_encrypted="", credentials_changed_at=at, desired_power=""
        )
        record_audit(
            actor=actor, action="node.bmc_credentials_scrubbed", target=node, after={"redfish_url": bmc.redfish_url}
        )
    return disposal
