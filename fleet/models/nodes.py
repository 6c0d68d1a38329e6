"""Node types, nodes, their GPUs and drives, and each node's event trail and agent work items.
Cross-object placement rules live in `placement_errors`, used by `Node.clean()`."""

from decimal import Decimal

from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import F, Max, Q
from django.db.models.functions import Lower

from core.ids import uuid7
from core.models import BaseModel

from .. import sku_users
from ..choices import (
    COOLING_SATISFIES,
    RECONCILED_LIFECYCLES,
    AgentAction,
    AgentActionState,
    Attribution,
    CoolingRequirement,
    DriveInterface,
    Health,
    Lifecycle,
    PowerState,
    WallPowerSource,
)
from ..validators import validate_gpu_uuid, validate_hostname, validate_node_address
from .facility import KW, FabricDomain, Rack, weakest_feed_kw


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

    # What identifies the type and what nodes, allocations, placements and bills were sized by:
    # the slug is the billing SKU (price books, metering), the rest the hardware. Fixed while any
    # node, allocation or price-book entry uses the type; descriptive fields (vendor model, year,
    # source) stay editable.
    FIXED_WHEN_IN_USE = (
        "slug",
        "gpu_model",
        "generation",
        "gpus_per_node",
        "cooling_requirement",
        "node_kw",
        "rack_kw",
        "u_height",
        "cuda_compute_capability",
        "nvlink_domain_gpus",
        "fabric",
    )

    def users(self, slug: str | None = None) -> dict[str, int]:
        """What uses this type now: nodes, allocations (tenancy's rows, through their reverse
        relation) and what other apps registered with fleet.sku_users (price-book entries)."""
        found = {
            "node(s)": Node.objects.filter(node_type_id=self.pk).count() if self.pk else 0,
            "allocation(s)": self.allocations.count() if self.pk else 0,
            **sku_users.users_of(slug or self.slug),
        }
        return {label: n for label, n in found.items() if n}

    def in_use(self) -> bool:
        """`users()` answered with EXISTS queries (the delete button asks on every page view)."""
        return bool(self.pk) and (
            Node.objects.filter(node_type_id=self.pk).exists()
            or self.allocations.exists()
            or bool(sku_users.users_of(self.slug))
        )

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
        users = self.users(slug=stored["slug"])
        if users:
            in_use = ", ".join(f"{n} {label}" for label, n in users.items())
            raise ValidationError(
                {
                    f: (
                        f"{in_use} use type {stored['slug']}; its {self._meta.get_field(f).verbose_name} cannot "
                        f"change under them (was {stored[f]}). Create a new node type instead and move the "
                        "nodes to it (the node form, or an import with updates)."
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
    commissioned_on = models.DateField(null=True, blank=True, help_text="when it entered service (age for disposition)")
    asset_tag = models.CharField(
        max_length=64, blank=True, help_text="the owner's asset tag on the chassis label (searchable from the console)"
    )
    # Network identities: the operators' management network, and the data-plane address a tenant
    # connects to (ssh). Unique across the fleet; from enrolment or the admin import.
    management_address = models.GenericIPAddressField(
        null=True, blank=True, unique=True, validators=[validate_node_address], help_text="management network address"
    )
    data_address = models.GenericIPAddressField(
        null=True,
        blank=True,
        unique=True,
        validators=[validate_node_address],
        help_text="data-plane address tenants connect to (ssh)",
    )

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
    # The per-GPU figures of the latest heartbeat that listed GPUs, written by the heartbeat's own
    # node UPDATE (no statement of its own): {"at": received, "gpus": [{"index", "temperature_c",
    # "power_w", "xid_errors", "ecc_sbe", ...}]}. Board power per GPU, not the node's draw.
    gpu_telemetry = models.JSONField(
        null=True, blank=True, editable=False, help_text="per-GPU figures of the latest heartbeat that listed GPUs"
    )
    # A drain asked of a node that carries a live allocation: the allocation loop moves the
    # tenant off by the deadline (fleet.selectors.nodes_to_drain()); cleared once it is off.
    drain_requested_at = models.DateTimeField(null=True, blank=True)
    drain_deadline = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["hostname"]
        constraints = [
            # DNS names are not case-sensitive: DC1-GPU00003 is the same host as dc1-gpu00003. A
            # unique index on LOWER(hostname); lookups that ignore case use it too.
            models.UniqueConstraint(
                Lower("hostname"),
                name="fleet_node_hostname_ci_unique",
                violation_error_message="Another node has this hostname in other letter case; hostnames are not "
                "case-sensitive. Choose another name.",
            ),
            models.UniqueConstraint(fields=["rack", "u_position"], name="fleet_node_rack_u_unique"),
            models.UniqueConstraint(
                fields=["asset_tag"], condition=~Q(asset_tag=""), name="fleet_node_asset_tag_unique"
            ),
            models.CheckConstraint(condition=Q(lifecycle__in=Lifecycle.values), name="fleet_node_lifecycle_valid"),
            models.CheckConstraint(
                condition=Q(management_address__isnull=True)
                | Q(data_address__isnull=True)
                | ~Q(management_address=F("data_address")),
                name="fleet_node_addresses_differ",
                violation_error_message="A node's management and data-plane addresses must differ.",
            ),
        ]
        indexes = [
            models.Index(fields=["lifecycle", "health", "cordoned"], name="fleet_node_placeable_idx"),
            # the node list's "drain pending" filter: the few nodes a drain was asked of
            models.Index(
                fields=["drain_requested_at"],
                condition=Q(drain_requested_at__isnull=False),
                name="fleet_node_drain_pending_idx",
            ),
            # Placement reads only the free nodes of one type, per domain: they have an index of their
            # own, and it holds every column placement reads of them (domain, leaf, health, id), so
            # counting each domain's free nodes is an index-only scan instead of a heap visit per
            # free node (~20,000 of them at 125,000 nodes, 80 % used).
            models.Index(
                fields=["node_type", "fabric_domain", "leaf_switch", "health", "id"],
                condition=Q(lifecycle="available", cordoned=False),
                name="fleet_node_free_by_type_idx",
            ),
            # The reconciler claims working nodes in id order, 500 at a time: without this it walks
            # the primary key past every idle node (20 rows read per one claimed at 5 % working, a
            # whole-table walk per pass when none is). Only working rows are in it.
            models.Index(
                fields=["id"], condition=Q(lifecycle__in=RECONCILED_LIFECYCLES), name="fleet_node_working_idx"
            ),
            # The overview's "what is wrong now" counts and lists the unwell nodes still in the fleet
            # (health.selectors.what_is_wrong_now, the same condition): without this, two sequential
            # scans of every node (~50 ms each at 125,000) to find the few that are not healthy.
            models.Index(
                fields=["health"],
                condition=~Q(health=Health.HEALTHY) & ~Q(lifecycle__in=(Lifecycle.RETIRED, Lifecycle.DISPOSED)),
                name="fleet_node_unwell_idx",
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
        if not (self.rack_id and self.node_type_id):
            return
        errors = []
        stored = None
        if self.pk:
            stored = (
                Node.objects.filter(pk=self.pk)
                .values(*self.LOCKED_WHILE_ALLOCATED, "rack__hall_id", "node_type__node_kw")
                .first()
            )
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
        # Feeds and the hall budget are checked on a change that adds load (a new node, another
        # rack or hall, a hungrier type), so an edit of anything else is never blocked by them.
        more_kw = stored is None or stored["node_type__node_kw"] < self.node_type.node_kw
        to_rack = more_kw or stored["rack_id"] != self.rack_id
        to_hall = more_kw or stored["rack__hall_id"] != self.rack.hall_id
        hall_load = None
        if to_hall:  # the hall's nameplate load without this node as stored
            hall_load = self.rack.hall.placed_load_kw()
            if stored and stored["rack__hall_id"] == self.rack.hall_id:
                hall_load -= stored["node_type__node_kw"]
        errors += placement_errors(
            rack=self.rack,
            node_type=self.node_type,
            u_position=self.u_position,
            fabric_domain=self.fabric_domain,
            others=[(o.hostname, o.u_position, o.node_type.u_height, o.node_type.node_kw) for o in others],
            feed_kw=weakest_feed_kw(self.rack) if to_rack else None,
            hall_load_kw=hall_load,
        )
        if errors:
            raise ValidationError(errors)


ALLOCATED_LIFECYCLES = (Lifecycle.PROVISIONING, Lifecycle.ACTIVE, Lifecycle.RELEASING)
REFUSAL_CHUNK = 2000


def hardware_change_refusals(nodes, *, history: dict | None = None) -> dict:
    """node id → why a person may not add, change, move or remove the node's GPUs and drives now.

    They are evidence while it matters: while the node is allocated, and from the start of its
    last allocation until every one of its drives has a verified sanitisation record made after
    it (a node that has served a tenant and has no drive rows counts as not sanitised). Then
    they change only through the node agent's inventory and the sanitisation flow, which write
    them directly. A node never in service (a typo at enrolment) may still be corrected.

    Allocations are tenancy's rows and sanitisation records end-of-life's: both are read through
    reverse relations. Two queries for any number of nodes (one when none has served); a caller
    that has read the allocations already passes `history` ({node id: (live, last start)})."""
    by_id = {n.pk: n for n in nodes if n is not None and n.pk}
    refusals: dict = {}
    served: dict = {}
    ids = [] if history is not None else list(by_id)
    for pk, (live, last) in (history or {}).items():
        if pk in by_id:
            _judge(by_id[pk], live, last, refusals, served)
    for start in range(0, len(ids), REFUSAL_CHUNK):
        rows = (
            Node.objects.filter(pk__in=ids[start : start + REFUSAL_CHUNK])
            .values("pk")
            .annotate(
                # a live membership's start, if any: set exactly when one has not ended
                live=Max("allocation_memberships__started_at", filter=Q(allocation_memberships__ended_at__isnull=True)),
                last=Max("allocation_memberships__started_at"),
            )
            .values_list("pk", "live", "last")
        )
        for pk, live, last in rows:
            _judge(by_id[pk], live is not None, last, refusals, served)
    sanitised: dict = {}  # node id → the oldest of its drives' latest verified sanitisation; None: one has none
    served_ids = list(served)
    for start in range(0, len(served_ids), REFUSAL_CHUNK):
        drives = (
            Drive.objects.filter(node_id__in=served_ids[start : start + REFUSAL_CHUNK])
            .values("pk", "node_id")
            .annotate(at=Max("sanitization_records__performed_at", filter=Q(sanitization_records__verified=True)))
            .values_list("node_id", "at")
        )
        for node_id, at in drives:
            if node_id in sanitised and (sanitised[node_id] is None or at is None):
                sanitised[node_id] = None
            else:
                sanitised[node_id] = at if node_id not in sanitised else min(sanitised[node_id], at)
    for pk, last in served.items():
        at = sanitised.get(pk)
        if at is None or at < last:
            refusals[pk] = (
                f"{by_id[pk].hostname} has been in service (its last allocation started {last:%Y-%m-%d %H:%M} UTC) "
                "and its drives have not all been sanitised since; its GPUs and drives are evidence and change "
                "only through the node agent's inventory and the sanitisation flow."
            )
    return refusals


def _judge(node, live: bool, last, refusals: dict, served: dict) -> None:
    if live or node.lifecycle in ALLOCATED_LIFECYCLES:
        refusals[node.pk] = (
            f"{node.hostname} carries a tenant allocation; its GPUs and drives stay as they are until it is drained."
        )
    elif last is not None:
        served[node.pk] = last


class _Evidence:
    """GPUs and drives remember the values they were loaded with, so that `clean()` knows what a
    form changes (and which node it came from) without reading the row again."""

    EVIDENCE_FIELDS: tuple = ()

    @classmethod
    def from_db(cls, db, field_names, values):
        instance = super().from_db(db, field_names, values)
        instance._loaded = dict(zip(field_names, values, strict=True))
        return instance

    def evidence_refusal(self) -> str | None:
        """Why this add, change or move may not be saved by a person (None when it may)."""
        loaded = getattr(self, "_loaded", None)
        if loaded is not None and not any(f in loaded and loaded[f] != getattr(self, f) for f in self.EVIDENCE_FIELDS):
            return None
        ids = {self.node_id, (loaded or {}).get("node_id")} - {None}
        refusals = hardware_change_refusals(Node.objects.filter(pk__in=ids)) if ids else {}
        return next(iter(refusals.values()), None)


def placement_errors(
    *,
    rack: Rack,
    node_type: NodeType,
    u_position,
    fabric_domain,
    others,
    feed_kw: Decimal | None = None,
    hall_load_kw: Decimal | None = None,
) -> list[str]:
    """Whether a node of `node_type` fits at `u_position` in `rack` next to `others`
    ((hostname, u_position, u_height, node_kw) of the nodes already there). Pure: the admin's
    clean() passes rows from the database, the importer rows from the database and the file.

    With `feed_kw` (what the rack's weakest feed carries, `weakest_feed_kw`) each feed of its
    redundant pair must carry the rack alone; with `hall_load_kw` (the hall's nameplate load
    without this node) the hall's IT power budget must hold the node too."""
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
    if feed_kw is not None and placed + node_type.node_kw > feed_kw:
        errors.append(
            f"Each power feed of rack {rack.name} must carry the rack alone (A/B redundancy); its weakest "
            f"carries {feed_kw} kW, the rack already draws {placed} kW and {node_type.slug} adds "
            f"{node_type.node_kw} kW. Choose another rack, or upgrade its feeds first."
        )
    budget = rack.hall.it_power_budget_kw if hall_load_kw is not None else None
    if budget is not None and hall_load_kw + node_type.node_kw > budget:
        errors.append(
            f"Hall {rack.hall} has an IT power budget of {budget} kW and already carries {hall_load_kw} kW at "
            f"nameplate; {node_type.slug} adds {node_type.node_kw} kW, {hall_load_kw + node_type.node_kw - budget} "
            "kW over. Choose a rack in another hall, or retire nodes here first."
        )
    if fabric_domain is not None and fabric_domain.site_id != rack.hall.site_id:
        errors.append(
            f"Fabric {fabric_domain.name} is in site {fabric_domain.site}; rack {rack.name} is in "
            f"{rack.hall.site}. A node and its fabric must be in one site."
        )
    return errors


class GPU(_Evidence, models.Model):
    """One GPU in a node."""

    EVIDENCE_FIELDS = ("node_id", "index", "uuid", "serial")

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
        refusal = self.evidence_refusal() if self.node_id else None
        if refusal:
            raise ValidationError(f"Not saved: {refusal}")
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


class Drive(_Evidence, models.Model):
    """A drive that may hold tenant data; nothing leaves before it is sanitised."""

    EVIDENCE_FIELDS = ("node_id", "serial", "model", "capacity_gb", "interface", "self_encrypting", "purge_supported")

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

    def clean(self):
        super().clean()
        refusal = self.evidence_refusal() if self.node_id else None
        if refusal:
            raise ValidationError(f"Not saved: {refusal}")


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
        indexes = [
            models.Index(fields=["node", "-at"], name="fleet_nodeevent_node_at_idx"),
            # the whole trail, newest first, a page at a time (the node events admin)
            models.Index(fields=["at", "id"], name="fleet_nodeevent_at_idx"),
        ]

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
