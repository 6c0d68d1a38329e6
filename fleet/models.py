"""The physical fleet: sites, halls, racks and their power, fabrics, node types, nodes, GPUs
and drives, plus each node's event trail.

Cross-object rules (a rack must power and cool what is placed in it; a node and its fabric
sit in one site) live in `clean()`, so the admin, imports and services all enforce them.
"""
from decimal import Decimal

from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import Q, Sum

from core.ids import uuid7
from core.models import AppendOnlyModel, BaseModel

from .choices import (
    COOLING_SATISFIES,
    AgentAction,
    AgentActionState,
    Attribution,
    Cooling,
    CoolingRequirement,
    CustodyKind,
    DriveInterface,
    FabricTechnology,
    Health,
    Lifecycle,
    PowerState,
    SanitizationMethod,
    SanitizationSource,
)

KW = {"max_digits": 9, "decimal_places": 2, "validators": [MinValueValidator(Decimal("0"))]}


class Site(BaseModel):
    """A data-centre campus."""

    slug = models.SlugField(max_length=50, unique=True)
    name = models.CharField(max_length=100, unique=True)
    region = models.CharField(max_length=50, blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Hall(BaseModel):
    """A data hall with an IT power budget; facility power is IT power × PUE."""

    site = models.ForeignKey(Site, on_delete=models.PROTECT, related_name="halls")
    name = models.CharField(max_length=100)
    it_power_budget_kw = models.DecimalField(**KW, help_text="IT power the hall's electrical plant can deliver (kW)")
    pue = models.DecimalField(
        max_digits=4, decimal_places=2, default=Decimal("1.58"),
        validators=[MinValueValidator(Decimal("1"))],
        help_text="Power usage effectiveness; default 1.58 = Uptime Institute 2023 industry average",
    )
    grid_columns = models.PositiveSmallIntegerField(default=16, help_text="racks per row on the floor map")

    class Meta:
        ordering = ["site__name", "name"]
        constraints = [models.UniqueConstraint(fields=["site", "name"], name="fleet_hall_site_name_unique")]

    def __str__(self) -> str:
        return f"{self.site.slug}/{self.name}"


class Rack(BaseModel):
    """A rack position: what it can power and what it can cool bound what it may hold."""

    hall = models.ForeignKey(Hall, on_delete=models.PROTECT, related_name="racks")
    name = models.CharField(max_length=50)
    row = models.PositiveSmallIntegerField(default=0, help_text="floor-map row")
    column = models.PositiveSmallIntegerField(default=0, help_text="floor-map column")
    u_height = models.PositiveSmallIntegerField(default=42)
    rated_power_kw = models.DecimalField(**KW, help_text="power budget of the rack's feeds (kW)")
    cooling = models.CharField(max_length=16, choices=Cooling.choices, default=Cooling.AIR)
    cooling_capacity_kw = models.DecimalField(**KW, help_text="heat the position can remove (kW)")

    class Meta:
        ordering = ["hall__name", "row", "column", "name"]
        constraints = [
            models.UniqueConstraint(fields=["hall", "name"], name="fleet_rack_hall_name_unique"),
            models.UniqueConstraint(fields=["hall", "row", "column"], name="fleet_rack_hall_grid_unique"),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def usable_kw(self) -> Decimal:
        """A rack can run what it can both power and cool."""
        return min(self.rated_power_kw, self.cooling_capacity_kw)

    def clean(self):
        super().clean()
        if self.pk and self.rated_power_kw is not None and self.cooling_capacity_kw is not None:
            placed = Node.objects.filter(rack=self).aggregate(kw=Sum("node_type__node_kw"))["kw"] or Decimal("0")
            if placed > self.usable_kw:
                raise ValidationError(
                    f"The nodes already in {self.name} draw {placed} kW, more than the {self.usable_kw} kW it "
                    "could power and cool with these values. Move nodes out first."
                )


class PowerFeed(BaseModel):
    """An electrical feed to a rack (A/B redundant pairs). The rack's budget is what one feed
    of a redundant pair can carry, so losing a feed never trips the other."""

    rack = models.ForeignKey(Rack, on_delete=models.CASCADE, related_name="power_feeds")
    name = models.CharField(max_length=50)
    voltage = models.PositiveSmallIntegerField(default=415)
    amperage = models.PositiveSmallIntegerField(default=32)
    three_phase = models.BooleanField(default=True)
    max_utilization_pct = models.PositiveSmallIntegerField(default=80, help_text="continuous-load derating")

    class Meta:
        ordering = ["rack__name", "name"]
        constraints = [models.UniqueConstraint(fields=["rack", "name"], name="fleet_powerfeed_rack_name_unique")]

    def __str__(self) -> str:
        return f"{self.rack.name}/{self.name}"

    @property
    def available_kw(self) -> Decimal:
        phase_factor = Decimal("1.732") if self.three_phase else Decimal("1")
        watts = Decimal(self.voltage) * Decimal(self.amperage) * phase_factor * Decimal(self.max_utilization_pct) / 100
        return (watts / 1000).quantize(Decimal("0.01"))


class FabricDomain(BaseModel):
    """A network fabric a job can span: an InfiniBand/RoCE pod or an NVLink domain."""

    site = models.ForeignKey(Site, on_delete=models.PROTECT, related_name="fabric_domains")
    name = models.CharField(max_length=100)
    technology = models.CharField(max_length=16, choices=FabricTechnology.choices)
    generation = models.CharField(max_length=32, help_text="GPU generation the fabric serves, e.g. hopper")
    leaf_count = models.PositiveSmallIntegerField(default=0)
    spine_count = models.PositiveSmallIntegerField(default=0)
    max_endpoints = models.PositiveIntegerField(
        default=2048, help_text="NDR two-tier fat tree tops out at 2,048 endpoints (facility.csv)"
    )
    nodes_per_leaf = models.PositiveSmallIntegerField(default=4)

    class Meta:
        ordering = ["site__name", "name"]
        constraints = [models.UniqueConstraint(fields=["site", "name"], name="fleet_fabric_site_name_unique")]

    def __str__(self) -> str:
        return self.name


class NodeType(BaseModel):
    """A sellable server model. The catalogue ships from shared reference data
    (generations.csv) with its sources."""

    slug = models.SlugField(max_length=50, unique=True, help_text="instance type name, e.g. h100-sxm-8x")
    vendor_model = models.CharField(max_length=100)
    gpu_model = models.CharField(max_length=100)
    generation = models.CharField(max_length=32)
    gpus_per_node = models.PositiveSmallIntegerField()
    node_kw = models.DecimalField(**KW, help_text="maximum draw of one node (kW)")
    rack_kw = models.DecimalField(
        **KW, null=True, blank=True,
        help_text="for rack-scale systems (NVL72): the whole rack's draw; such a type needs a rack that carries it",
    )
    cooling_requirement = models.CharField(max_length=16, choices=CoolingRequirement.choices)
    u_height = models.PositiveSmallIntegerField(default=8)
    cuda_compute_capability = models.CharField(max_length=8)
    nvlink_domain_gpus = models.PositiveSmallIntegerField(default=8)
    fabric = models.CharField(max_length=32, help_text="fabric the node ships with, e.g. ib-ndr-400g")
    year = models.PositiveSmallIntegerField()
    source = models.TextField(blank=True, help_text="where the figures come from")

    class Meta:
        ordering = ["generation", "slug"]

    def __str__(self) -> str:
        return self.slug

    @property
    def is_rack_scale(self) -> bool:
        return self.rack_kw is not None


class Node(BaseModel):
    """One server. Its lifecycle changes only through fleet.services.lifecycle.transition()."""

    hostname = models.CharField(max_length=100, unique=True)
    serial = models.CharField(max_length=100, unique=True)
    rack = models.ForeignKey(Rack, on_delete=models.PROTECT, related_name="nodes")
    u_position = models.PositiveSmallIntegerField(help_text="lowest U the node occupies (1 = bottom)")
    node_type = models.ForeignKey(NodeType, on_delete=models.PROTECT, related_name="nodes")
    fabric_domain = models.ForeignKey(FabricDomain, null=True, blank=True, on_delete=models.PROTECT, related_name="nodes")
    leaf_switch = models.CharField(max_length=50, blank=True, help_text="the fabric leaf the node's ports land on")
    bmc_address = models.GenericIPAddressField(null=True, blank=True)
    commissioned_on = models.DateField(null=True, blank=True, help_text="when it entered service (age for disposition)")

    lifecycle = models.CharField(max_length=20, choices=Lifecycle.choices, default=Lifecycle.ENROLLED, db_index=True)
    target_lifecycle = models.CharField(max_length=20, choices=Lifecycle.choices, blank=True)
    state_deadline = models.DateTimeField(null=True, blank=True, help_text="a working state past this moves to its failure state")
    power_state = models.CharField(max_length=8, choices=PowerState.choices, default=PowerState.UNKNOWN)
    cordoned = models.BooleanField(default=False)
    cordon_reason = models.CharField(max_length=200, blank=True)
    attribution = models.CharField(max_length=16, choices=Attribution.choices, blank=True)
    health = models.CharField(max_length=16, choices=Health.choices, default=Health.UNKNOWN, db_index=True)
    last_error = models.TextField(blank=True)
    failed_attempts = models.PositiveSmallIntegerField(default=0, help_text="consecutive failed actions (backoff)")
    next_attempt_at = models.DateTimeField(null=True, blank=True, help_text="backoff: not retried before this")
    last_heartbeat_at = models.DateTimeField(null=True, blank=True)
    observed_power_w = models.IntegerField(
        null=True, blank=True,
        help_text="whole-node draw the agent last reported (W); trusted while last_heartbeat_at is fresh",
    )
    # A drain asked of a node that carries a live allocation: the allocation loop moves the
    # tenant off by the deadline (fleet.selectors.nodes_to_drain()); cleared once it is off.
    drain_requested_at = models.DateTimeField(null=True, blank=True)
    drain_deadline = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["hostname"]
        constraints = [
            models.UniqueConstraint(fields=["rack", "u_position"], name="fleet_node_rack_u_unique"),
            models.CheckConstraint(condition=Q(lifecycle__in=Lifecycle.values), name="fleet_node_lifecycle_valid"),
        ]
        indexes = [
            models.Index(fields=["lifecycle", "health", "cordoned"], name="fleet_node_placeable_idx"),
            # placement reads only the free nodes of one type per domain: keep them in their own small index
            models.Index(fields=["node_type", "fabric_domain", "leaf_switch"],
                         condition=Q(lifecycle="available", cordoned=False), name="fleet_node_free_by_type_idx"),
        ]

    def __str__(self) -> str:
        return self.hostname

    @property
    def gpu_count(self) -> int:
        return self.node_type.gpus_per_node

    def clean(self):
        super().clean()
        if not (self.rack_id and self.node_type_id):
            return
        rack, node_type = self.rack, self.node_type
        errors = []
        if rack.cooling not in COOLING_SATISFIES[node_type.cooling_requirement]:
            errors.append(
                f"{node_type.slug} needs {node_type.get_cooling_requirement_display().lower()} cooling; "
                f"rack {rack.name} is {rack.get_cooling_display().lower()}-cooled. Choose a rack with suitable cooling."
            )
        if node_type.is_rack_scale and rack.usable_kw < node_type.rack_kw:
            errors.append(
                f"{node_type.slug} is a rack-scale system drawing {node_type.rack_kw} kW; rack {rack.name} can power and "
                f"cool only {rack.usable_kw} kW. Choose a position rated for at least {node_type.rack_kw} kW."
            )
        others = Node.objects.filter(rack=rack).exclude(pk=self.pk)
        placed = Decimal(others.aggregate(kw=Sum("node_type__node_kw"))["kw"] or 0).quantize(Decimal("0.01"))
        if placed + node_type.node_kw > rack.usable_kw:
            errors.append(
                f"Rack {rack.name} can power and cool {rack.usable_kw} kW; it already carries {placed} kW and "
                f"{node_type.slug} adds {node_type.node_kw} kW. Choose another rack or move a node out."
            )
        if self.u_position is not None:
            top = self.u_position + node_type.u_height - 1
            if self.u_position < 1 or top > rack.u_height:
                errors.append(f"U{self.u_position}-U{top} does not fit in the {rack.u_height}U rack {rack.name}.")
            for other in others.select_related("node_type"):
                other_top = other.u_position + other.node_type.u_height - 1
                if self.u_position <= other_top and other.u_position <= top:
                    errors.append(f"U{self.u_position}-U{top} overlaps {other.hostname} at U{other.u_position}-U{other_top}.")
        if self.fabric_domain_id and self.fabric_domain.site_id != rack.hall.site_id:
            errors.append(
                f"Fabric {self.fabric_domain.name} is in site {self.fabric_domain.site}; rack {rack.name} is in "
                f"{rack.hall.site}. A node and its fabric must be in one site."
            )
        if errors:
            raise ValidationError(errors)


class GPU(models.Model):
    """One GPU in a node."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="gpus")
    index = models.PositiveSmallIntegerField()
    uuid = models.CharField(max_length=64, unique=True, help_text="NVML UUID, GPU-xxxxxxxx-...")
    serial = models.CharField(max_length=64, blank=True)

    class Meta:
        ordering = ["node__hostname", "index"]
        verbose_name = "GPU"
        constraints = [models.UniqueConstraint(fields=["node", "index"], name="fleet_gpu_node_index_unique")]

    def __str__(self) -> str:
        return f"{self.node.hostname}/gpu{self.index}"


class Drive(models.Model):
    """A drive that may hold tenant data; nothing leaves before it is sanitised."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="drives")
    serial = models.CharField(max_length=64, unique=True)
    model = models.CharField(max_length=100)
    capacity_gb = models.PositiveIntegerField()
    interface = models.CharField(max_length=8, choices=DriveInterface.choices, default=DriveInterface.NVME)
    self_encrypting = models.BooleanField(default=False)
    purge_supported = models.BooleanField(
        default=False, help_text="the drive can be purged in place (NVMe sanitize or cryptographic erase); "
                                 "a drive that cannot must be destroyed before it leaves the organisation")
    # Reconciled from the agent's drive inventory (fleet.services.drive_inventory).
    last_reported_at = models.DateTimeField(null=True, blank=True, help_text="last time the node agent saw it")
    missing_since = models.DateTimeField(
        null=True, blank=True, help_text="set when the agent's inventory no longer lists it; blocks every exit")

    class Meta:
        ordering = ["node__hostname", "serial"]

    def __str__(self) -> str:
        return self.serial


class NodeDriveInventory(models.Model):
    """The drives the node agent last reported (its health report's `drives`), as reported.

    The exit gate compares this with the node's Drive rows, so a drive row deleted or moved
    after the agent counted it is a disagreement, not a silent pass."""

    node = models.OneToOneField(Node, on_delete=models.CASCADE, primary_key=True, related_name="drive_inventory")
    reported_at = models.DateTimeField(help_text="when the agent observed the drives")
    drives = models.JSONField(default=list, help_text="[{serial, model, capacity_gb, self_encrypting, purge_supported}]")

    def __str__(self) -> str:
        return f"drive inventory of {self.node_id} at {self.reported_at:%Y-%m-%d %H:%M}"


class NodeEvent(models.Model):
    """A node's audit trail: every transition and operator action (who, what, from, to, why, when)."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="events")
    at = models.DateTimeField()
    actor = models.CharField(max_length=200)
    action = models.CharField(max_length=50)
    from_state = models.CharField(max_length=20, blank=True)
    to_state = models.CharField(max_length=20, blank=True)
    reason = models.TextField(blank=True)
    request_id = models.CharField(max_length=64, blank=True)

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["node", "-at"], name="fleet_nodeevent_node_at_idx")]

    def __str__(self) -> str:
        return f"{self.node_id} {self.action} {self.from_state}→{self.to_state}"


class NodeAgentAction(models.Model):
    """A unit of work for a node's agent (provision, stop, wipe, reset, diagnostics, sanitise).

    The agent sees pending actions in its desired state and reports each outcome once; the
    reconciler moves the node on from the results. At most one pending action of a kind per
    node (and per drive for sanitize_drive), enforced by the database, so requesting the same
    work twice is harmless.
    """

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="agent_actions")
    action = models.CharField(max_length=20, choices=AgentAction.choices)
    params = models.JSONField(default=dict, blank=True)
    drive = models.ForeignKey(Drive, null=True, blank=True, on_delete=models.CASCADE, related_name="agent_actions")
    state = models.CharField(max_length=12, choices=AgentActionState.choices, default=AgentActionState.PENDING)
    requested_by = models.CharField(max_length=200)
    reason = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    detail = models.TextField(blank=True)
    output = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["created_at"]
        constraints = [
            models.UniqueConstraint(fields=["node", "action"], condition=Q(state="pending", drive__isnull=True),
                                    name="fleet_agentaction_one_pending_per_kind"),
            models.UniqueConstraint(fields=["drive", "action"], condition=Q(state="pending", drive__isnull=False),
                                    name="fleet_agentaction_one_pending_per_drive"),
        ]
        indexes = [models.Index(fields=["node", "state"], name="fleet_agentaction_node_state")]

    def __str__(self) -> str:
        return f"{self.action} on {self.node_id} ({self.state})"


class SnapshotResolution(models.TextChoices):
    FIVE_MINUTES = "5m", "5 minutes"
    HOURLY = "1h", "Hourly"


class FleetSnapshot(models.Model):
    """One point of utilisation history for one (generation, hall): written every 5 minutes by
    the fleet_snapshot loop; hourly rows keep 90 days, 5-minute rows 48 hours (fleet.services.snapshots)."""

    id = models.BigAutoField(primary_key=True)
    at = models.DateTimeField()
    resolution = models.CharField(max_length=2, choices=SnapshotResolution.choices)
    generation = models.CharField(max_length=32)
    hall = models.ForeignKey(Hall, on_delete=models.CASCADE, related_name="snapshots")
    nodes = models.PositiveIntegerField(default=0)
    gpus_total = models.PositiveIntegerField(default=0)
    gpus_healthy = models.PositiveIntegerField(default=0)
    gpus_allocated = models.PositiveIntegerField(default=0)
    gpus_in_repair = models.PositiveIntegerField(default=0)
    nodes_by_lifecycle = models.JSONField(default=dict, help_text="node count per lifecycle state")
    power_kw = models.DecimalField(max_digits=11, decimal_places=2, default=Decimal("0"))

    class Meta:
        ordering = ["-at"]
        constraints = [
            models.UniqueConstraint(fields=["resolution", "at", "generation", "hall"], name="fleet_snapshot_point_unique"),
        ]
        indexes = [models.Index(fields=["resolution", "at"], name="fleet_snapshot_res_at_idx")]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M} {self.resolution} {self.generation} {self.hall_id}"
# ---- end of life: sanitisation, disposal checklist, custody, disposition plans -------------------

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
    node_agent_action = models.OneToOneField(NodeAgentAction, null=True, blank=True, on_delete=models.PROTECT,
                                             related_name="sanitization_record")

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
    asset_tags_removed_at = models.DateTimeField(null=True, blank=True)
    asset_tags_removed_by = models.CharField(max_length=200, blank=True)

    def __str__(self) -> str:
        return f"disposal checklist of {self.node_id}"


class CustodyTransfer(AppendOnlyModel):
    """Chain of custody: the node handed from one party to the next (buyer, recycler, courier)."""

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
    drive_status = models.JSONField(default=list, blank=True,
                                    help_text="RMA shipment: [{serial, status}] for every drive shipped")

    class Meta:
        ordering = ["at", "id"]

    def __str__(self) -> str:
        return f"{self.node_id}: {self.from_party} → {self.to_party}"
