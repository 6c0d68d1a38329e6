"""Fleet API shapes (docs/api.md: node agent API and operator API)."""

from rest_framework import serializers

from fleet.choices import AgentActionState, CustodyKind, SanitizationMethod
from fleet.models import NodeEvent
from fleet.services import sanitization


class ActionResultIn(serializers.Serializer):
    action_id = serializers.UUIDField()
    action = serializers.CharField(max_length=20)
    status = serializers.ChoiceField(choices=[AgentActionState.SUCCEEDED, AgentActionState.FAILED])
    detail = serializers.CharField(allow_blank=True, required=False, default="")
    output = serializers.DictField(required=False, default=dict)
    finished_at = serializers.DateTimeField(required=False, allow_null=True, default=None)


class DesiredActionOut(serializers.Serializer):
    id = serializers.UUIDField()
    action = serializers.CharField()
    params = serializers.DictField()


class MeteringGrantOut(serializers.Serializer):
    grant = serializers.CharField(
        help_text="opaque, signed by the billing ledger; send it with every meter event "
        "of this allocation in [valid_from, valid_until)"
    )
    allocation_id = serializers.UUIDField()
    tenant_id = serializers.UUIDField()
    sku = serializers.CharField(help_text="instance-type name")
    gpus = serializers.IntegerField(help_text="GPUs metered: quantity ≤ gpus × seconds")
    valid_from = serializers.DateTimeField()
    valid_until = serializers.DateTimeField(help_text="a few hours ahead; renewed while the allocation lives")


class DesiredStateOut(serializers.Serializer):
    lifecycle = serializers.CharField()
    allocation_id = serializers.UUIDField(allow_null=True)
    tenant_id = serializers.UUIDField(allow_null=True)
    actions = DesiredActionOut(many=True)
    sku = serializers.CharField()
    gpus = serializers.IntegerField()
    metering_grants = MeteringGrantOut(many=True, help_text="one per live allocation on this node")


class NodeActionIn(serializers.Serializer):
    action = serializers.CharField(max_length=50)
    reason = serializers.CharField(max_length=2000, allow_blank=True, required=False, default="")
    force = serializers.BooleanField(
        required=False,
        default=False,
        help_text="decommission, sanitize, retire and dispose refuse a node a tenant holds (409 node_allocated) "
        "unless this is true",
    )


class DriveOut(serializers.Serializer):
    id = serializers.UUIDField()
    serial = serializers.CharField()
    sanitized = serializers.BooleanField()


class NodeOut(serializers.Serializer):
    """Built from a node plus per-page lookups (`context`: allocations, drives, conditions)."""

    id = serializers.UUIDField()
    hostname = serializers.CharField()
    site = serializers.CharField(source="rack.hall.site.slug")
    hall = serializers.CharField(source="rack.hall.name")
    rack = serializers.CharField(source="rack.name")
    node_type = serializers.CharField(source="node_type.slug")
    generation = serializers.CharField(source="node_type.generation")
    gpu_count = serializers.IntegerField(source="node_type.gpus_per_node")
    fabric_domain = serializers.CharField(source="fabric_domain.name", allow_null=True, default=None)
    lifecycle = serializers.CharField()
    target_lifecycle = serializers.CharField()
    state_deadline = serializers.DateTimeField(allow_null=True)
    power_state = serializers.CharField()
    health = serializers.CharField()
    cordoned = serializers.BooleanField()
    cordon_reason = serializers.CharField()
    attribution = serializers.CharField()
    last_error = serializers.CharField()
    conditions = serializers.SerializerMethodField()
    allocation_id = serializers.SerializerMethodField()
    drives = serializers.SerializerMethodField()

    def get_conditions(self, node) -> list[dict]:
        return self.context["conditions"].get(node.pk, [])

    def get_allocation_id(self, node) -> str | None:
        allocation_id = self.context["allocations"].get(node.pk)
        return str(allocation_id) if allocation_id else None

    def get_drives(self, node) -> list[dict]:
        return DriveOut(self.context["drives"].get(node.pk, []), many=True).data


class NodeEventOut(serializers.ModelSerializer):
    class Meta:
        model = NodeEvent
        fields = ["at", "actor", "action", "from_state", "to_state", "reason"]


# ---- end of life: sanitisation records, checklist steps, custody


class SanitizationRecordIn(serializers.Serializer):
    method = serializers.ChoiceField(
        choices=SanitizationMethod.choices, help_text="NIST SP 800-88: clear, purge or destroy"
    )
    technique = serializers.CharField(max_length=200, help_text="e.g. NVMe sanitize crypto erase, overwrite, shred")
    tool = serializers.CharField(max_length=200)
    verified = serializers.BooleanField()
    evidence = serializers.CharField(
        max_length=sanitization.MAX_EVIDENCE_CHARS,
        help_text="what proves it: tool output, verification read-back, photo reference",
    )


class SanitizationRecordOut(serializers.Serializer):
    id = serializers.UUIDField()
    drive_id = serializers.UUIDField()
    drive_serial = serializers.CharField(source="drive.serial")
    node_id = serializers.UUIDField(source="drive.node_id")
    method = serializers.CharField()
    technique = serializers.CharField()
    tool = serializers.CharField()
    verified = serializers.BooleanField()
    evidence = serializers.CharField()
    actor = serializers.CharField()
    source = serializers.CharField()
    performed_at = serializers.DateTimeField()


class ReasonIn(serializers.Serializer):
    reason = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")


class DriveStatusIn(serializers.Serializer):
    serial = serializers.CharField(max_length=64)
    status = serializers.CharField(max_length=200, help_text="e.g. sealed in tamper-evident bag 12345, unsanitised")


class CustodyTransferIn(serializers.Serializer):
    from_party = serializers.CharField(max_length=200, help_text="who hands the node over (e.g. the site)")
    to_party = serializers.CharField(max_length=200, help_text="buyer, recycler or RMA vendor")
    document_ref = serializers.CharField(max_length=200, help_text="bill of lading, sale contract, certificate")
    at = serializers.DateTimeField(required=False, help_text="when custody passed; now if omitted")
    kind = serializers.ChoiceField(
        choices=CustodyKind.choices,
        default=CustodyKind.DISPOSAL,
        help_text="rma_shipment: the drives ship with the node under the carrier's custody",
    )
    carrier = serializers.CharField(max_length=200, required=False, default="", allow_blank=True)
    drive_status = DriveStatusIn(
        many=True,
        required=False,
        default=list,
        max_length=64,
        help_text="rma_shipment: the status of every drive aboard",
    )


class DataHandlingOut(serializers.Serializer):
    node_id = serializers.UUIDField()
    hostname = serializers.CharField()
    lifecycle = serializers.CharField()
    drives_total = serializers.IntegerField()
    drives_sanitized = serializers.IntegerField()
    unsanitized_drives = serializers.ListField(child=serializers.DictField())
    bmc_reset_at = serializers.DateTimeField(allow_null=True)
    asset_tags_removed_at = serializers.DateTimeField(allow_null=True)
    custody_transfers = serializers.IntegerField()
    retire_missing = serializers.ListField(child=serializers.CharField())
    dispose_missing = serializers.ListField(child=serializers.CharField())
    destination = serializers.CharField(help_text="inside (redeploy, lease: clear) or outside (purge or destroy)")
    inventory_reported_at = serializers.DateTimeField(allow_null=True, help_text="when the agent last counted drives")
    drives = serializers.ListField(
        child=serializers.DictField(), help_text="every drive: serial, required_method, record_id, ok, problem"
    )
    rma_gate = serializers.DictField(help_text="the same gate for an RMA (drives sanitised, or shipped aboard)")
