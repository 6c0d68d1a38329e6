"""Fleet API shapes (API.md: node agent API and operator API)."""
from rest_framework import serializers

from fleet.choices import AgentActionState
from fleet.models import NodeEvent


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
    grant = serializers.CharField(help_text="opaque, signed by the billing ledger; send it with every meter event "
                                            "of this allocation in [valid_from, valid_until)")
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
