"""Who owns what: tenants and their members. Allocations, partitions, volumes and quotas
build on these."""

from decimal import Decimal

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from core.choices import TenantRole
from core.ids import uuid7
from core.models import BaseModel
from core.validators import validate_display_text

from .choices import (
    AllocationNodeRole,
    AllocationState,
    FabricMode,
    PartitionKind,
    PartitionState,
)


class Tenant(BaseModel):
    """A customer organisation. Everything a tenant owns is invisible to every other tenant."""

    slug = models.SlugField(max_length=50, unique=True)
    name = models.CharField(max_length=200, validators=[validate_display_text])
    require_baseline = models.BooleanField(
        default=False,
        help_text="place this tenant only on nodes that run their type's golden software baseline",
    )
    # The bill-to block of its invoices (billing reads these; they are printed as entered).
    legal_name = models.CharField(
        max_length=200,
        blank=True,
        help_text="as printed on invoices; the name if empty",
        validators=[validate_display_text],
    )
    billing_address = models.TextField(blank=True, help_text="postal address for invoices, one line per line")
    tax_id = models.CharField(max_length=50, blank=True, help_text="VAT or other tax registration number")
    tax_rate_percent = models.DecimalField(
        max_digits=5,
        decimal_places=2,
        default=Decimal("0"),
        validators=[MinValueValidator(Decimal("0")), MaxValueValidator(Decimal("100"))],
        help_text="tax charged on invoices, in percent of the net amount; frozen on each invoice at finalization",
    )
    payment_terms_days = models.PositiveSmallIntegerField(
        default=30, validators=[MaxValueValidator(365)], help_text="days from issue to due date"
    )
    max_ssh_keys = models.PositiveSmallIntegerField(
        default=50, validators=[MaxValueValidator(1000)], help_text="SSH public keys the tenant may register"
    )

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug


class Membership(BaseModel):
    """A user's role in a tenant (portal access)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=TenantRole.choices, default=TenantRole.MEMBER)

    class Meta:
        ordering = ["tenant__slug", "user__username"]
        constraints = [models.UniqueConstraint(fields=["tenant", "user"], name="tenants_membership_unique")]

    def __str__(self) -> str:
        return f"{self.user} in {self.tenant} ({self.role})"


class Allocation(BaseModel):
    """A tenant's request for `node_count` whole nodes of one instance type, and its life.

    Its state changes only through tenants.services.allocations (its own transition table).
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="allocations")
    name = models.CharField(max_length=100, validators=[validate_display_text])
    instance_type = models.ForeignKey("fleet.NodeType", on_delete=models.PROTECT, related_name="allocations")
    node_count = models.PositiveSmallIntegerField()
    fabric = models.CharField(max_length=16, choices=FabricMode.choices, default=FabricMode.ISOLATED)
    fabric_domain = models.ForeignKey(
        "fleet.FabricDomain",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="allocations",
        help_text="where it was placed",
    )
    state = models.CharField(
        max_length=16, choices=AllocationState.choices, default=AllocationState.PENDING, db_index=True
    )
    degraded = models.BooleanField(default=False, help_text="a node was pulled for health; replacement pending")
    idempotency_key = models.CharField(max_length=255, blank=True, help_text="the key of the request that created it")
    fabric_partition = models.ForeignKey(
        "tenants.FabricPartition",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="allocations",
        help_text="isolated allocations only",
    )
    activated_at = models.DateTimeField(null=True, blank=True, help_text="when it first became active")
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    state_deadline = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    failure_reason = models.TextField(blank=True)
    # What the tenant gets on every node (tenants.services.access): who logs in, with which keys,
    # on which image, with which volumes mounted.
    login_user = models.CharField(max_length=32, default="ubuntu", help_text="the account the tenant's keys open")
    ssh_keys = models.ManyToManyField("tenants.SshKey", blank=True, related_name="allocations")
    all_ssh_keys = models.BooleanField(
        default=True, help_text="follow the tenant's keys (added and deleted keys reach the nodes); else ssh_keys only"
    )
    volumes = models.ManyToManyField("tenants.Volume", blank=True, related_name="allocations")
    image = models.ForeignKey(
        "fleet.SoftwareBaseline",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="allocations",
        help_text="the golden baseline the nodes must run",
    )
    access_revision = models.CharField(
        max_length=64,
        blank=True,
        help_text="digest of the access the nodes should have now (keys, user, image, mounts)",
    )

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["tenant", "-created_at", "-id"], name="tenants_alloc_tenant_page")]

    def __str__(self) -> str:
        return f"{self.name} ({self.tenant.slug})"


class AllocationNode(models.Model):
    """A node's membership of an allocation over time. A node is in at most one live
    allocation (ended_at IS NULL): a partial unique index, so double-booking is impossible
    whatever the application does."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    allocation = models.ForeignKey(Allocation, on_delete=models.CASCADE, related_name="memberships")
    node = models.ForeignKey("fleet.Node", on_delete=models.PROTECT, related_name="allocation_memberships")
    role = models.CharField(max_length=16, choices=AllocationNodeRole.choices, default=AllocationNodeRole.ORIGINAL)
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)
    end_reason = models.CharField(max_length=200, blank=True)
    fabric_partition = models.ForeignKey(
        "tenants.FabricPartition",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="node_memberships",
        help_text="the partition key programmed on this node's fabric ports",
    )
    wiped_at = models.DateTimeField(
        null=True, blank=True, help_text="when the node was seen wiped after leaving; unwiped nodes are never re-placed"
    )
    ready_at = models.DateTimeField(null=True, blank=True, help_text="when the agent reported the node reachable")
    ready_facts = models.JSONField(default=dict, blank=True, help_text="what the agent checked when it said ready")
    access_revision = models.CharField(
        max_length=64, blank=True, help_text="the access revision (keys, user, image, mounts) the agent last confirmed"
    )

    class Meta:
        ordering = ["started_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["node"], condition=models.Q(ended_at__isnull=True), name="tenants_node_in_one_live_allocation"
            ),
        ]
        indexes = [
            models.Index(
                fields=["node"],
                condition=models.Q(ended_at__isnull=False, wiped_at__isnull=True),
                name="tenants_allocnode_unwiped",
            )
        ]

    def __str__(self) -> str:
        return f"{self.node_id} in {self.allocation_id}"


class Quota(BaseModel):
    """How many nodes of one generation a tenant may hold at once (every non-terminal allocation counts)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="quotas")
    generation = models.CharField(max_length=32)
    max_nodes = models.PositiveIntegerField()

    class Meta:
        ordering = ["tenant__slug", "generation"]
        constraints = [models.UniqueConstraint(fields=["tenant", "generation"], name="tenants_quota_unique")]

    def __str__(self) -> str:
        return f"{self.tenant.slug}: {self.max_nodes} {self.generation}"


class StorageQuota(BaseModel):
    """How much storage a tenant may hold: volumes and their total size. Without a row a tenant
    may create no volume (like a generation without a node quota)."""

    tenant = models.OneToOneField(Tenant, on_delete=models.CASCADE, related_name="storage_quota")
    max_volumes = models.PositiveIntegerField()
    max_gb = models.PositiveBigIntegerField(help_text="total size_gb of all the tenant's volumes")

    def __str__(self) -> str:
        return f"{self.tenant.slug}: {self.max_volumes} volume(s), {self.max_gb} GB"


class FabricPartition(BaseModel):
    """A tenant's slice of one fabric domain: an InfiniBand partition key or an NVLink partition.

    The key is unique per fabric domain (a database constraint), so two tenants can never share
    one; and a tenant has at most one partition per domain, so isolated allocations reuse it.
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="fabric_partitions")
    fabric_domain = models.ForeignKey("fleet.FabricDomain", on_delete=models.PROTECT, related_name="partitions")
    kind = models.CharField(max_length=8, choices=PartitionKind.choices)
    partition_key = models.PositiveIntegerField(help_text="IB P_Key (0x0001-0x7ffe) or NVLink partition id")
    name = models.CharField(max_length=100, validators=[validate_display_text])
    state = models.CharField(max_length=12, choices=PartitionState.choices, default=PartitionState.ACTIVE)
    idempotency_key = models.CharField(max_length=255, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["fabric_domain", "partition_key"], name="tenants_partition_key_unique"),
            models.UniqueConstraint(fields=["tenant", "fabric_domain"], name="tenants_partition_one_per_domain"),
        ]
        indexes = [models.Index(fields=["tenant", "-created_at", "-id"], name="tenants_partition_page")]

    def __str__(self) -> str:
        return f"{self.name} ({self.kind} {self.partition_key:#06x})"


class Volume(BaseModel):
    """Tenant storage, exported only to the tenant's own fabric partition."""

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="volumes")
    name = models.CharField(max_length=100, validators=[validate_display_text])
    size_gb = models.PositiveIntegerField()
    export_partition = models.ForeignKey(
        FabricPartition,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="volumes",
        help_text="the only partition it is exported to",
    )
    idempotency_key = models.CharField(max_length=255, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["tenant", "-created_at", "-id"], name="tenants_volume_page")]

    def __str__(self) -> str:
        return f"{self.name} ({self.size_gb} GB)"


class WebhookEndpoint(BaseModel):
    """A tenant's webhook receiver (tenants.notifications): HTTPS, a signing secret Hangar
    generates, the event types it wants. Managed by the tenant's admins."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="webhook_endpoints")
    url = models.URLField(max_length=500)
    secret = models.CharField(max_length=100, help_text="signs each delivery (shown once, when created)")
    event_types = models.JSONField(default=list, help_text="event types delivered here (the catalogue in docs/api.md)")
    description = models.CharField(max_length=200, blank=True, validators=[validate_display_text])
    enabled = models.BooleanField(default=True)

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"{self.tenant_id} webhook {self.url}"


class EmailRecipient(BaseModel):
    """A tenant's e-mail address for notifications (finance for invoices, on-call for allocations)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="email_recipients")
    email = models.EmailField(max_length=254)
    event_types = models.JSONField(default=list)
    enabled = models.BooleanField(default=True)

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [models.UniqueConstraint(fields=["tenant", "email"], name="tenants_recipient_unique")]

    def __str__(self) -> str:
        return f"{self.tenant_id} mail {self.email}"


class SshKey(BaseModel):
    """A tenant's SSH public key (tenants.ssh_keys parses it; only the canonical public part is kept)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="ssh_keys")
    name = models.CharField(max_length=100, validators=[validate_display_text])
    key_type = models.CharField(max_length=40)
    bits = models.PositiveIntegerField()
    public_key = models.TextField(help_text="canonical '<type> <base64>', no options, no comment")
    fingerprint = models.CharField(max_length=60, help_text="SHA256:… as ssh-keygen -l prints it")
    idempotency_key = models.CharField(max_length=255, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "fingerprint"], name="tenants_sshkey_unique_per_tenant"),
        ]
        indexes = [models.Index(fields=["tenant", "-created_at", "-id"], name="tenants_sshkey_page")]

    def __str__(self) -> str:
        return f"{self.name} ({self.fingerprint})"
