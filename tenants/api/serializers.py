"""Tenant API shapes (docs/api.md, "Tenant API")."""

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from core.validators import validate_display_text
from fleet.models import FabricDomain, NodeType
from tenants.choices import AllocationState, FabricMode, PartitionKind, PartitionState
from tenants.models import Allocation, FabricPartition, SshKey, Volume
from tenants.services.volumes import MAX_VOLUMES_PER_ALLOCATION as MAX_ATTACHED
from tenants.ssh_keys import MAX_KEY_CHARS, InvalidSshKey, parse_public_key

MAX_NODE_COUNT = 4096
MAX_KEYS_PER_ALLOCATION = 100
MAX_VOLUMES_PER_ALLOCATION = MAX_ATTACHED
# A POSIX account name as useradd(8) accepts it by default (NAME_REGEX), and not an account the
# image keeps for itself.
LOGIN_USER = r"^[a-z_][a-z0-9_-]{0,31}$"
RESERVED_USERS = frozenset({"root", "daemon", "bin", "sys", "sync", "nobody", "sshd", "hangar"})


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
    address = serializers.IPAddressField(allow_null=True, help_text="the data-plane address to connect to")
    ssh = serializers.CharField(allow_null=True, help_text="`ssh <user>@<address>`, once the node has an address")
    ready = serializers.BooleanField(help_text="the agent reported the node reachable with the tenant's access")
    ready_at = serializers.DateTimeField(allow_null=True)
    access_confirmed = serializers.BooleanField(
        help_text="the agent confirmed the allocation's current keys and mounts on this node"
    )
    facts = serializers.DictField(help_text="what the agent checked when it reported ready")


class ReplacedNodeSerializer(serializers.Serializer):
    hostname = serializers.CharField()
    reason = serializers.CharField()
    at = serializers.DateTimeField()


class AllocationSerializer(serializers.ModelSerializer):
    instance_type = serializers.CharField(source="instance_type.slug")
    generation = serializers.CharField(source="instance_type.generation")
    fabric_partition = serializers.UUIDField(source="fabric_partition_id", allow_null=True)
    nodes = serializers.SerializerMethodField()
    user = serializers.CharField(source="login_user")
    image = serializers.UUIDField(source="image_id", allow_null=True)
    ssh_key_ids = serializers.SerializerMethodField()
    volume_ids = serializers.SerializerMethodField()
    replaced_nodes = serializers.SerializerMethodField()

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
            "user",
            "image",
            "ssh_key_ids",
            "volume_ids",
            "nodes",
            "replaced_nodes",
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
            {
                "id": str(m.node_id),
                "hostname": m.node.hostname,
                "gpus": m.node.node_type.gpus_per_node,
                "address": m.node.data_address,
                "ssh": f"ssh {allocation.login_user}@{m.node.data_address}" if m.node.data_address else None,
                "ready": m.ready_at is not None,
                "ready_at": m.ready_at.isoformat().replace("+00:00", "Z") if m.ready_at else None,
                "access_confirmed": bool(m.access_revision) and m.access_revision == allocation.access_revision,
                "facts": m.ready_facts or {},
            }
            for m in members
        ]

    @extend_schema_field(serializers.ListField(child=serializers.UUIDField()))
    def get_ssh_key_ids(self, allocation) -> list[str]:
        """The keys the nodes carry: every key of the tenant unless the allocation named some."""
        if not allocation.all_ssh_keys:
            return sorted(str(k.pk) for k in allocation.ssh_keys.all())
        cache = self.context.setdefault("tenant_key_ids", {})  # one query per page, not per row
        if allocation.tenant_id not in cache:
            cache[allocation.tenant_id] = sorted(
                str(k) for k in SshKey.objects.filter(tenant_id=allocation.tenant_id).values_list("id", flat=True)
            )
        return cache[allocation.tenant_id]

    @extend_schema_field(serializers.ListField(child=serializers.UUIDField()))
    def get_volume_ids(self, allocation) -> list[str]:
        return sorted(str(v.pk) for v in allocation.volumes.all())

    @extend_schema_field(ReplacedNodeSerializer(many=True))
    def get_replaced_nodes(self, allocation) -> list[dict]:
        """Nodes that left the allocation before it ended, and why (e.g. not ready in time)."""
        members = getattr(allocation, "replaced_members", None)
        if members is None:
            members = allocation.memberships.filter(end_reason__startswith="replaced").select_related("node")
        return [
            {"hostname": m.node.hostname, "reason": m.end_reason, "at": m.ended_at.isoformat().replace("+00:00", "Z")}
            for m in members
        ]


class AllocationListSerializer(serializers.Serializer):
    results = AllocationSerializer(many=True)
    next_page_token = serializers.CharField(allow_null=True)


class AllocationCreateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=100, validators=[validate_display_text])
    instance_type = serializers.CharField(max_length=50, help_text="an instance type name from GET /instance-types")
    node_count = serializers.IntegerField(min_value=1, max_value=MAX_NODE_COUNT)
    fabric = serializers.ChoiceField(choices=FabricMode.choices, default=FabricMode.ISOLATED)
    user = serializers.RegexField(
        LOGIN_USER,
        max_length=32,
        required=False,
        default="ubuntu",
        help_text="the account your keys open on every node (default ubuntu)",
    )
    image = serializers.CharField(
        max_length=64, required=False, allow_null=True, help_text="an image id from GET /images; default: the type's"
    )
    ssh_key_ids = serializers.ListField(
        child=serializers.CharField(max_length=64),
        max_length=MAX_KEYS_PER_ALLOCATION,
        required=False,
        allow_null=True,
        help_text="keys from GET /ssh-keys; omitted or null: all your keys, including ones added later",
    )
    volume_ids = serializers.ListField(
        child=serializers.CharField(max_length=64),
        max_length=MAX_VOLUMES_PER_ALLOCATION,
        required=False,
        help_text="volumes from GET /volumes, mounted on every node",
    )

    def validate_user(self, value: str) -> str:
        if value in RESERVED_USERS:
            raise serializers.ValidationError(f"{value!r} is reserved; choose another account name, e.g. ubuntu")
        return value

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


class SshKeySerializer(serializers.ModelSerializer):
    class Meta:
        model = SshKey
        fields = ["id", "name", "key_type", "bits", "fingerprint", "public_key", "created_at"]
        read_only_fields = fields


class SshKeyListSerializer(serializers.Serializer):
    results = SshKeySerializer(many=True)
    next_page_token = serializers.CharField(allow_null=True)


class SshKeyCreateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=100, validators=[validate_display_text])
    public_key = serializers.CharField(
        max_length=MAX_KEY_CHARS,
        trim_whitespace=False,
        help_text="one OpenSSH public key line: ssh-ed25519, ecdsa-sha2-nistp256/384/521 or ssh-rsa (>= 3072 bits)",
    )

    def validate_public_key(self, value: str) -> str:
        try:
            parse_public_key(value)
        except InvalidSshKey as bad:
            raise serializers.ValidationError(str(bad)) from None
        return value


class ImageSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    name = serializers.CharField()
    instance_type = serializers.CharField()
    versions = serializers.DictField(child=serializers.CharField(), help_text="component → version")


class ImageListSerializer(serializers.Serializer):
    results = ImageSerializer(many=True)
    next_page_token = serializers.CharField(allow_null=True)


class VolumeAttachSerializer(serializers.Serializer):
    volume_id = serializers.CharField(max_length=64)
