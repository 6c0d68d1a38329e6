"""Tenant API shapes (docs/api.md, "Tenant API")."""

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from core.validators import validate_display_text
from fleet.models import FabricDomain, NodeType
from tenants.choices import AllocationState, FabricMode, PartitionKind, PartitionState
from tenants.models import Allocation, FabricPartition, Volume

MAX_NODE_COUNT = 4096


class InstanceTypeSerializer(serializers.Serializer):
    name = serializers.CharField()
    gpu_model = serializers.CharField()
    generation = serializers.CharField()
    gpus_per_node = serializers.IntegerField()
    fabric = serializers.CharField()
    price_per_gpu_hour = serializers.DecimalField(max_digits=10, decimal_places=2, allow_null=True)
    currency = serializers.CharField()
    available_nodes = serializers.IntegerField()


class InstanceTypeListSerializer(serializers.Serializer):
    results = InstanceTypeSerializer(many=True)
    next_page_token = serializers.CharField(allow_null=True)


class AllocationNodeSerializer(serializers.Serializer):
    id = serializers.UUIDField(source="node.id")
    hostname = serializers.CharField(source="node.hostname")
    gpus = serializers.IntegerField(source="node.node_type.gpus_per_node")


class AllocationSerializer(serializers.ModelSerializer):
    instance_type = serializers.CharField(source="instance_type.slug")
    generation = serializers.CharField(source="instance_type.generation")
    fabric_partition = serializers.UUIDField(source="fabric_partition_id", allow_null=True)
    nodes = serializers.SerializerMethodField()

    class Meta:
        model = Allocation
        fields = [
            "id",
            "name",
            "instance_type",
            "generation",
            "node_count",
            "fabric",
            "fabric_partition",
            "state",
            "degraded",
            "nodes",
            "created_at",
            "updated_at",
            "cancel_requested_at",
            "ended_at",
            "failure_reason",
        ]
        read_only_fields = fields

    @extend_schema_field(AllocationNodeSerializer(many=True))
    def get_nodes(self, allocation) -> list[dict]:
        members = getattr(allocation, "live_members", None)
        if members is None:
            members = allocation.memberships.filter(ended_at__isnull=True).select_related("node__node_type")
        # Plain dicts: a nested serializer per row doubles the cost of a 50-row page.
        return [
            {"id": str(m.node_id), "hostname": m.node.hostname, "gpus": m.node.node_type.gpus_per_node} for m in members
        ]


class AllocationListSerializer(serializers.Serializer):
    results = AllocationSerializer(many=True)
    next_page_token = serializers.CharField(allow_null=True)


class AllocationCreateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=100, validators=[validate_display_text])
    instance_type = serializers.CharField(max_length=50, help_text="an instance type name from GET /instance-types")
    node_count = serializers.IntegerField(min_value=1, max_value=MAX_NODE_COUNT)
    fabric = serializers.ChoiceField(choices=FabricMode.choices, default=FabricMode.ISOLATED)

    def validate_instance_type(self, value: str) -> NodeType:
        node_type = NodeType.objects.filter(slug=value).first()
        if node_type is None:
            raise serializers.ValidationError(f"unknown instance type {value!r}; GET /api/v1/instance-types lists them")
        return node_type


class AllocationFilterSerializer(serializers.Serializer):
    state = serializers.ChoiceField(choices=AllocationState.choices, required=False)


class FabricPartitionSerializer(serializers.ModelSerializer):
    fabric_domain = serializers.CharField(source="fabric_domain.name")
    kind = serializers.ChoiceField(choices=PartitionKind.choices)
    state = serializers.ChoiceField(choices=PartitionState.choices)

    class Meta:
        model = FabricPartition
        fields = ["id", "name", "fabric_domain", "kind", "partition_key", "state", "created_at", "updated_at"]
        read_only_fields = fields


class FabricPartitionListSerializer(serializers.Serializer):
    results = FabricPartitionSerializer(many=True)
    next_page_token = serializers.CharField(allow_null=True)


class FabricPartitionCreateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=100, validators=[validate_display_text])
    fabric_domain = serializers.CharField(max_length=100, help_text="the fabric domain's name, e.g. dc1-ndr-pod01")

    def validate_fabric_domain(self, value: str) -> FabricDomain:
        domain = FabricDomain.objects.filter(name=value).first()
        if domain is None:
            raise serializers.ValidationError(f"unknown fabric domain {value!r}; an allocation's nodes show theirs")
        return domain


class VolumeSerializer(serializers.ModelSerializer):
    export_partition = serializers.UUIDField(source="export_partition_id", allow_null=True)

    class Meta:
        model = Volume
        fields = ["id", "name", "size_gb", "export_partition", "created_at", "updated_at"]
        read_only_fields = fields


class VolumeListSerializer(serializers.Serializer):
    results = VolumeSerializer(many=True)
    next_page_token = serializers.CharField(allow_null=True)


class VolumeCreateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=100, validators=[validate_display_text])
    size_gb = serializers.IntegerField(min_value=1, max_value=1_000_000)
    export_partition = serializers.CharField(
        required=False, allow_null=True, max_length=64, help_text="id of one of your fabric partitions"
    )


class TenantSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    slug = serializers.CharField()
    name = serializers.CharField()
    quota = serializers.DictField(child=serializers.IntegerField(), help_text="max nodes at once per generation")
    usage_now = serializers.DictField(child=serializers.IntegerField(), help_text="nodes held now per generation")
