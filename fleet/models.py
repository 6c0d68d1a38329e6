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
    EnergySource,
    FabricTechnology,
    Health,
    Lifecycle,
    PowerState,
    SanitizationMethod,
    SanitizationSource,
    WallPowerSource,
)
from .validators import normalise_mac, validate_bmc_address, validate_gpu_uuid, validate_hostname, validate_mac

KW = {"max_digits": 9, "decimal_places": 2, "validators": [MinValueValidator(Decimal("0"))]}


def _reference_decimal(name: str) -> Decimal:
    from core.reference_data import parameter

    return parameter(name).low


def default_electricity_price() -> Decimal:
    return _reference_decimal("electricity_price")


def default_grid_carbon_intensity() -> Decimal:
    return _reference_decimal("grid_carbon_intensity_us_average")


class Site(BaseModel):
    """A data-centre campus, with what its energy costs and emits."""

    slug = models.SlugField(max_length=50, unique=True)
    name = models.CharField(max_length=100, unique=True)
    region = models.CharField(max_length=50, blank=True)
    electricity_usd_per_kwh = models.DecimalField(
        max_digits=8,
        decimal_places=5,
        default=default_electricity_price,
        validators=[MinValueValidator(Decimal("0"))],
        help_text="what the site pays per facility kWh; default economics.csv electricity_price",
    )
    grid_kg_co2e_per_kwh = models.DecimalField(
        max_digits=6,
        decimal_places=4,
        default=default_grid_carbon_intensity,
        validators=[MinValueValidator(Decimal("0"))],
        help_text="grid carbon intensity; default facility.csv grid_carbon_intensity_us_average",
    )

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
        max_digits=4,
        decimal_places=2,
        default=Decimal("1.58"),
        validators=[MinValueValidator(Decimal("1"))],
        help_text="Power usage effectiveness; default 1.58 = Uptime Institute 2023 industry average",
    )
    grid_columns = models.PositiveSmallIntegerField(default=16, help_text="racks per row on the floor map")

    class Meta:
        ordering = ["site__name", "name"]
        constraints = [models.UniqueConstraint(fields=["site", "name"], name="fleet_hall_site_name_unique")]

    def __str__(self) -> str:
        return f"{self.site.slug}/{self.name}"

    def placed_load_kw(self) -> Decimal:
        """The nameplate draw of every node in the hall's racks."""
        total = Node.objects.filter(rack__hall=self).aggregate(kw=Sum("node_type__node_kw"))["kw"] or 0
        return Decimal(total).quantize(Decimal("0.01"))

    def clean(self):
        super().clean()
        if self.pk and self.it_power_budget_kw is not None:
            load = self.placed_load_kw()
            if self.it_power_budget_kw < load:
                budget = Decimal(self.it_power_budget_kw).quantize(Decimal("0.01"))
                raise ValidationError(
                    {
                        "it_power_budget_kw": (
                            f"The nodes in {self.name} draw {load} kW at nameplate; a budget of {budget} kW "
                            f"would overload the hall by {load - budget} kW. Move or retire nodes first, "
                            "or give the budget the hall's plant really delivers."
                        )
                    }
                )


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
        if self.u_height is not None and self.u_height < 1:
            raise ValidationError({"u_height": "A rack is at least 1U high; a standard rack is 42U."})
        if not self.pk or self.rated_power_kw is None or self.cooling_capacity_kw is None:
            return
        errors = rack_errors_for_nodes(self, Node.objects.filter(rack=self).select_related("node_type"))
        if errors:
            raise ValidationError(errors)


def rack_errors_for_nodes(rack: "Rack", nodes) -> list[str]:
    """What these rack values would break for the nodes already in it (power, cooling, U height)."""
    errors = []
    nodes = list(nodes)
    placed = sum((n.node_type.node_kw for n in nodes), Decimal("0"))
    if placed > rack.usable_kw:
        errors.append(
            f"The nodes already in {rack.name} draw {placed} kW, more than the {rack.usable_kw} kW it "
            "could power and cool with these values. Move nodes out first."
        )
    for node in nodes:
        node_type = node.node_type
        if rack.cooling not in COOLING_SATISFIES[node_type.cooling_requirement]:
            errors.append(
                f"{node.hostname} ({node_type.slug}) needs {node_type.get_cooling_requirement_display().lower()} "
                f"cooling; {rack.name} would be {rack.get_cooling_display().lower()}-cooled. Move it out first."
            )
        elif node_type.is_rack_scale and rack.usable_kw < node_type.rack_kw:
            errors.append(
                f"{node.hostname} is a rack-scale {node_type.slug} drawing {node_type.rack_kw} kW; "
                f"{rack.name} could carry only {rack.usable_kw} kW."
            )
        top = node.u_position + node_type.u_height - 1
        if rack.u_height is not None and top > rack.u_height:
            errors.append(
                f"{node.hostname} occupies U{node.u_position}-U{top}; a {rack.u_height}U rack cannot hold it."
            )
    return errors


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
        **KW,
        null=True,
        blank=True,
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

    # What nodes, allocations and bills were sized by: fixed once a node has this type.
    FIXED_WHEN_IN_USE = ("generation", "gpus_per_node", "cooling_requirement", "node_kw", "rack_kw", "u_height")

    def clean(self):
        super().clean()
        if not self.pk:
            return
        stored = NodeType.objects.filter(pk=self.pk).values(*self.FIXED_WHEN_IN_USE).first()
        if stored is None:
            return
        changed = [f for f in self.FIXED_WHEN_IN_USE if stored[f] != getattr(self, f)]
        if not changed:
            return
        in_use = Node.objects.filter(node_type_id=self.pk).count()
        if in_use:
            raise ValidationError(
                {
                    f: (
                        f"{in_use} node(s) are of type {self.slug}; its {self._meta.get_field(f).verbose_name} "
                        f"cannot change under them (was {stored[f]}). Create a new node type instead."
                    )
                    for f in changed
                }
            )


class Node(BaseModel):
    """One server. Its lifecycle changes only through fleet.services.lifecycle.transition()."""

    hostname = models.CharField(max_length=100, unique=True, validators=[validate_hostname])
    serial = models.CharField(max_length=100, unique=True)
    rack = models.ForeignKey(Rack, on_delete=models.PROTECT, related_name="nodes")
    u_position = models.PositiveSmallIntegerField(help_text="lowest U the node occupies (1 = bottom)")
    node_type = models.ForeignKey(NodeType, on_delete=models.PROTECT, related_name="nodes")
    fabric_domain = models.ForeignKey(
        FabricDomain, null=True, blank=True, on_delete=models.PROTECT, related_name="nodes"
    )
    leaf_switch = models.CharField(max_length=50, blank=True, help_text="the fabric leaf the node's ports land on")
    bmc_address = models.CharField(
        max_length=253, blank=True, validators=[validate_bmc_address], help_text="the BMC's IP address or DNS name"
    )
    bmc_mac = models.CharField(
        max_length=17,
        blank=True,
        validators=[validate_mac],
        verbose_name="BMC MAC",
        help_text="the BMC's MAC address, e.g. 3c:ec:ef:12:34:56",
    )
    commissioned_on = models.DateField(null=True, blank=True, help_text="when it entered service (age for disposition)")

    lifecycle = models.CharField(max_length=20, choices=Lifecycle.choices, default=Lifecycle.ENROLLED, db_index=True)
    target_lifecycle = models.CharField(max_length=20, choices=Lifecycle.choices, blank=True)
    state_deadline = models.DateTimeField(
        null=True, blank=True, help_text="a working state past this moves to its failure state"
    )
    # Kept apart from the deadline: the reconciler moves the deadline later after a control-plane
    # outage, while agent results and check requests still count from the real entry.
    state_entered_at = models.DateTimeField(null=True, blank=True, help_text="when the node entered its current state")
    power_state = models.CharField(max_length=8, choices=PowerState.choices, default=PowerState.UNKNOWN)
    cordoned = models.BooleanField(default=False)
    cordon_reason = models.CharField(max_length=200, blank=True)
    attribution = models.CharField(max_length=16, choices=Attribution.choices, blank=True)
    health = models.CharField(max_length=16, choices=Health.choices, default=Health.UNKNOWN, db_index=True)
    last_error = models.TextField(blank=True)
    failed_attempts = models.PositiveSmallIntegerField(default=0, help_text="consecutive failed actions (backoff)")
    next_attempt_at = models.DateTimeField(null=True, blank=True, help_text="backoff: not retried before this")
    last_heartbeat_at = models.DateTimeField(null=True, blank=True)
    agent_clock_skew_s = models.IntegerField(
        null=True, blank=True, help_text="the agent's clock minus the server's at its last heartbeat (seconds)"
    )
    gpu_power_w = models.IntegerField(
        null=True,
        blank=True,
        help_text="sum of the GPUs' board power at the last heartbeat (W): GPU power, not the node's wall draw",
    )
    # The node's wall draw as a meter reports it (the BMC's chassis power or a metered PDU outlet),
    # when the agent relays one. Kept apart from GPU power: never shown under the other's name.
    wall_power_w = models.IntegerField(null=True, blank=True, help_text="wall draw last reported by a meter (W)")
    wall_power_source = models.CharField(max_length=8, choices=WallPowerSource.choices, blank=True)
    wall_power_at = models.DateTimeField(null=True, blank=True, help_text="when the control plane received it")
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
            models.Index(
                fields=["node_type", "fabric_domain", "leaf_switch"],
                condition=Q(lifecycle="available", cordoned=False),
                name="fleet_node_free_by_type_idx",
            ),
        ]

    def __str__(self) -> str:
        return self.hostname

    @property
    def gpu_count(self) -> int:
        return self.node_type.gpus_per_node

    # What an allocation depends on: fixed while the node carries a tenant.
    LOCKED_WHILE_ALLOCATED = ("rack_id", "u_position", "node_type_id", "fabric_domain_id", "leaf_switch")

    def is_allocated(self) -> bool:
        return bool(self.pk) and (
            self.lifecycle in ALLOCATED_LIFECYCLES or self.allocation_memberships.filter(ended_at__isnull=True).exists()
        )

    def clean(self):
        super().clean()
        if self.bmc_mac:
            self.bmc_mac = normalise_mac(self.bmc_mac)
        if not (self.rack_id and self.node_type_id):
            return
        errors = []
        if self.pk:
            stored = Node.objects.filter(pk=self.pk).values(*self.LOCKED_WHILE_ALLOCATED).first()
            if stored and self.is_allocated():
                moved = [f.removesuffix("_id") for f in self.LOCKED_WHILE_ALLOCATED if stored[f] != getattr(self, f)]
                if moved:
                    raise ValidationError(
                        f"{self.hostname} carries a tenant allocation; its {', '.join(moved)} cannot change under it. "
                        "Drain it first (node actions), then edit it once it is available."
                    )
            surplus = self.gpus.filter(index__gte=self.node_type.gpus_per_node).count() if stored else 0
            if surplus:
                errors.append(
                    f"{self.node_type.slug} has {self.node_type.gpus_per_node} GPUs; {self.hostname} has "
                    f"{surplus} GPU(s) at higher indexes. Remove them first or choose a matching type."
                )
        others = Node.objects.filter(rack=self.rack).exclude(pk=self.pk).select_related("node_type")
        errors += placement_errors(
            rack=self.rack,
            node_type=self.node_type,
            u_position=self.u_position,
            fabric_domain=self.fabric_domain,
            others=[(o.hostname, o.u_position, o.node_type.u_height, o.node_type.node_kw) for o in others],
        )
        if errors:
            raise ValidationError(errors)


ALLOCATED_LIFECYCLES = (Lifecycle.PROVISIONING, Lifecycle.ACTIVE, Lifecycle.RELEASING)


def placement_errors(*, rack: Rack, node_type: NodeType, u_position, fabric_domain, others) -> list[str]:
    """Whether a node of `node_type` fits at `u_position` in `rack` next to `others`
    ((hostname, u_position, u_height, node_kw) of the nodes already there). Pure: the admin's
    clean() passes rows from the database, the importer rows from the database and the file."""
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
    placed = sum((Decimal(o[3]) for o in others), Decimal("0")).quantize(Decimal("0.01"))
    if placed + node_type.node_kw > rack.usable_kw:
        errors.append(
            f"Rack {rack.name} can power and cool {rack.usable_kw} kW; it already carries {placed} kW and "
            f"{node_type.slug} adds {node_type.node_kw} kW. Choose another rack or move a node out."
        )
    if u_position is not None:
        top = u_position + node_type.u_height - 1
        if u_position < 1 or top > rack.u_height:
            errors.append(f"U{u_position}-U{top} does not fit in the {rack.u_height}U rack {rack.name}.")
        for hostname, other_u, other_height, _kw in others:
            other_top = other_u + other_height - 1
            if u_position <= other_top and other_u <= top:
                errors.append(f"U{u_position}-U{top} overlaps {hostname} at U{other_u}-U{other_top}.")
    if fabric_domain is not None and fabric_domain.site_id != rack.hall.site_id:
        errors.append(
            f"Fabric {fabric_domain.name} is in site {fabric_domain.site}; rack {rack.name} is in "
            f"{rack.hall.site}. A node and its fabric must be in one site."
        )
    return errors


class GPU(models.Model):
    """One GPU in a node."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="gpus")
    index = models.PositiveSmallIntegerField()
    uuid = models.CharField(
        max_length=64,
        unique=True,
        validators=[validate_gpu_uuid],
        help_text="NVML UUID as nvidia-smi -L prints it: GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx",
    )
    serial = models.CharField(max_length=64, blank=True)

    class Meta:
        ordering = ["node__hostname", "index"]
        verbose_name = "GPU"
        constraints = [models.UniqueConstraint(fields=["node", "index"], name="fleet_gpu_node_index_unique")]

    def __str__(self) -> str:
        return f"{self.node.hostname}/gpu{self.index}"

    def clean(self):
        super().clean()
        # index < the type's GPU count, with (node, index) unique, bounds a node's GPUs by its type.
        if self.node_id and self.index is not None:
            per_node = self.node.node_type.gpus_per_node
            if self.index >= per_node:
                raise ValidationError(
                    {
                        "index": (
                            f"{self.node.hostname} is a {self.node.node_type.slug} with {per_node} GPUs (indexes 0-{per_node - 1}); "
                            f"index {self.index} does not exist on it."
                        )
                    }
                )


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
        default=False,
        help_text="the drive can be purged in place (NVMe sanitize or cryptographic erase); "
        "a drive that cannot must be destroyed before it leaves the organisation",
    )
    # Reconciled from the agent's drive inventory (fleet.services.drive_inventory).
    last_reported_at = models.DateTimeField(null=True, blank=True, help_text="last time the node agent saw it")
    missing_since = models.DateTimeField(
        null=True, blank=True, help_text="set when the agent's inventory no longer lists it; blocks every exit"
    )

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
    drives = models.JSONField(
        default=list, help_text="[{serial, model, capacity_gb, self_encrypting, purge_supported}]"
    )

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
            models.UniqueConstraint(
                fields=["node", "action"],
                condition=Q(state="pending", drive__isnull=True),
                name="fleet_agentaction_one_pending_per_kind",
            ),
            models.UniqueConstraint(
                fields=["drive", "action"],
                condition=Q(state="pending", drive__isnull=False),
                name="fleet_agentaction_one_pending_per_drive",
            ),
        ]
        indexes = [models.Index(fields=["node", "state"], name="fleet_agentaction_node_state")]

    def __str__(self) -> str:
        return f"{self.action} on {self.node_id} ({self.state})"


class NodeEnergyCounter(models.Model):
    """The last cumulative energy counters a node's agent reported, the baseline the next
    reading's delta is taken from (fleet.services.energy). Resets and refusals are counted here."""

    node = models.OneToOneField(Node, on_delete=models.CASCADE, primary_key=True, related_name="energy_counter")
    read_at = models.DateTimeField(help_text="when the control plane received these counters")
    wall_energy_j = models.BigIntegerField(null=True, blank=True, help_text="meter's cumulative energy (J)")
    wall_source = models.CharField(max_length=8, choices=WallPowerSource.choices, blank=True)
    gpu_energy_mj = models.JSONField(default=dict, help_text="GPU index → NVML total energy (mJ)")
    resets = models.PositiveIntegerField(default=0, help_text="counters seen going backwards")
    last_reset_at = models.DateTimeField(null=True, blank=True)
    refused = models.PositiveIntegerField(default=0, help_text="readings above the node type's maximum")
    last_refused_at = models.DateTimeField(null=True, blank=True)
    last_refused_detail = models.CharField(max_length=200, blank=True)

    def __str__(self) -> str:
        return f"energy counters of {self.node_id}"


class NodeEnergyHour(models.Model):
    """Energy one node used in one UTC hour, by how it is known: `bmc`/`pdu` (a meter's counter)
    or `estimate` (GPU counters + the type's host share). A counter delta over a gap is spread
    evenly over the gap's hours, so an agent outage loses nothing."""

    id = models.BigAutoField(primary_key=True)
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="energy_hours")
    hour = models.DateTimeField(help_text="start of the UTC hour")
    source = models.CharField(max_length=8, choices=EnergySource.choices)
    it_energy_j = models.BigIntegerField(default=0, help_text="node wall (IT) energy (J)")
    gpu_energy_j = models.BigIntegerField(default=0, help_text="of which GPU board energy, where counters say (J)")
    seconds = models.PositiveIntegerField(default=0, help_text="seconds of the hour the counters cover")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["node", "hour", "source"], name="fleet_energyhour_unique")]
        indexes = [models.Index(fields=["hour", "node"], name="fleet_energyhour_hour_idx")]

    def __str__(self) -> str:
        return f"{self.node_id} {self.hour:%Y-%m-%d %H}h {self.source}"


class PowerPoint(models.Model):
    """A rack's wall draw over one minute or one hour (the power history; fleet.services.power_history).
    Minutes keep 30 days, hours 2 years. `source` says how the figure is known (bmc, pdu, estimate,
    rated or mixed) and `measured_nodes`/`nodes` how much of it was measured."""

    id = models.BigAutoField(primary_key=True)
    rack = models.ForeignKey(Rack, on_delete=models.CASCADE, related_name="power_points")
    resolution = models.CharField(max_length=2, choices=[("1m", "1 minute"), ("1h", "1 hour")])
    at = models.DateTimeField()
    kw = models.FloatField()
    kw_max = models.FloatField(help_text="highest minute in the period")
    source = models.CharField(max_length=8)
    nodes = models.PositiveSmallIntegerField(default=0)
    measured_nodes = models.PositiveSmallIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["resolution", "rack", "at"], name="fleet_powerpoint_unique")]
        indexes = [models.Index(fields=["resolution", "at"], name="fleet_powerpoint_res_at_idx")]


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
            models.UniqueConstraint(
                fields=["resolution", "at", "generation", "hall"], name="fleet_snapshot_point_unique"
            ),
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
    drive_status = models.JSONField(
        default=list, blank=True, help_text="RMA shipment: [{serial, status}] for every drive shipped"
    )

    class Meta:
        ordering = ["at", "id"]

    def __str__(self) -> str:
        return f"{self.node_id}: {self.from_party} → {self.to_party}"
