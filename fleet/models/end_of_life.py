"""What leaves the fleet: sanitisation evidence, disposals and the chain of custody
(append-only where it is evidence)."""

from django.db import models

from core.ids import uuid7
from core.models import AppendOnlyModel

from ..choices import (
    CustodyDestination,
    CustodyKind,
    SanitizationMethod,
    SanitizationSource,
)
from .nodes import Drive, Node, NodeAgentAction


class SanitizationRecord(AppendOnlyModel):
    """One drive's sanitisation (NIST SP 800-88): what was done, with what, whether it was
    verified, by whom and when. Never edited or deleted; a failed attempt stays on record and a
    later passing record supersedes it for the retire gate."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    # PROTECT: a drive with evidence of sanitisation cannot silently vanish with its node.
    drive = models.ForeignKey(Drive, on_delete=models.PROTECT, related_name="sanitization_records")
    method = models.CharField(max_length=8, choices=SanitizationMethod.choices)
    technique = models.CharField(max_length=200, help_text="e.g. NVMe sanitize crypto erase, overwrite, shred")
    tool = models.CharField(max_length=200)
    verified = models.BooleanField()
    evidence = models.TextField(blank=True)
    actor = models.CharField(max_length=200, help_text="operator or agent that performed it")
    performed_at = models.DateTimeField(db_index=True)
    source = models.CharField(max_length=8, choices=SanitizationSource.choices)
    node_agent_action = models.OneToOneField(
        NodeAgentAction, null=True, blank=True, on_delete=models.PROTECT, related_name="sanitization_record"
    )

    class Meta:
        ordering = ["performed_at", "id"]
        indexes = [models.Index(fields=["drive", "verified"], name="fleet_sanrec_drive_verified")]

    def __str__(self) -> str:
        return f"{self.method} of {self.drive_id} ({'verified' if self.verified else 'not verified'})"


class NodeDisposal(models.Model):
    """The data-handling checklist of a node beyond its drives: BMC reset, asset tags removed."""

    node = models.OneToOneField(Node, on_delete=models.CASCADE, primary_key=True, related_name="disposal")
    bmc_reset_at = models.DateTimeField(null=True, blank=True, help_text="BMC credentials reset and logs cleared")
    bmc_reset_by = models.CharField(max_length=200, blank=True)
    bmc_reset_evidence = models.JSONField(
        default=dict, blank=True, help_text="the BMC's answers to the Redfish reset and credential scrub, as received"
    )
    asset_tags_removed_at = models.DateTimeField(null=True, blank=True)
    asset_tags_removed_by = models.CharField(max_length=200, blank=True)

    def __str__(self) -> str:
        return f"disposal checklist of {self.node_id}"


class CustodyTransfer(AppendOnlyModel):
    """Chain of custody: the node handed from one party to the next (own site or lab, lessee, buyer,
    recycler, destruction vendor, RMA vendor)."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    node = models.ForeignKey(Node, on_delete=models.PROTECT, related_name="custody_transfers")
    from_party = models.CharField(max_length=200)
    to_party = models.CharField(max_length=200, help_text="buyer or recycler")
    at = models.DateTimeField()
    document_ref = models.CharField(max_length=200, help_text="bill of lading, sale contract, recycler certificate")
    recorded_by = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)
    # An RMA whose drives must ship with the node: the carrier and each drive's declared status
    # stand in for sanitisation records (fleet.services.drive_gate).
    kind = models.CharField(max_length=16, choices=CustodyKind.choices, default=CustodyKind.DISPOSAL)
    carrier = models.CharField(max_length=200, blank=True, help_text="carrier of an RMA shipment")
    drive_status = models.JSONField(
        default=list, blank=True, help_text="RMA shipment: [{serial, status}] for every drive shipped"
    )
    # Where the hardware goes decides its drives' sanitisation (NIST SP 800-88,
    # core/reference/sanitisation.csv): derived from the kind when the transfer is made and kept
    # with it, together with the record that vouched for each drive at that moment.
    destination_kind = models.CharField(
        max_length=20, choices=CustodyDestination.choices, default=CustodyDestination.UNSPECIFIED
    )
    leaves_organisation = models.BooleanField(
        default=True, help_text="the media leaves the organisation's control (derived from the destination kind)"
    )
    required_method = models.CharField(
        max_length=8,
        choices=SanitizationMethod.choices,
        default=SanitizationMethod.PURGE,
        help_text="the weakest method every drive needed for this destination (destroy where purge is impossible)",
    )
    drives = models.JSONField(
        default=list,
        blank=True,
        help_text="at the transfer: [{serial, required_method, record_id, record_method}] for every drive",
    )

    class Meta:
        ordering = ["at", "id"]

    def __str__(self) -> str:
        return f"{self.node_id}: {self.from_party} → {self.to_party}"
