"""Stored plans: generation migrations (with the work they schedule) and dispositions of
outgoing nodes. Each keeps the inputs it was computed from and the engine's answer as data,
so it reads the same later even when reference prices or the inventory change.

The tables were created by the fleet app and keep their names (``db_table``) so that moving
the models here moved no data.
"""

from django.db import models

from core.ids import uuid7
from core.models import BaseModel
from core.validators import validate_display_text
from fleet.choices import DispositionOption
from fleet.models import Node, NodeType, Rack


class DispositionPlan(BaseModel):
    """A disposition run: the inputs the operator chose and the valuation's answer, stored as
    computed so the plan reads the same later even if reference prices change."""

    name = models.CharField(max_length=200, validators=[validate_display_text])
    created_by = models.CharField(max_length=200)
    inputs = models.JSONField(help_text="selection, demands, horizon, channel, lease cap, assumption overrides")
    result = models.JSONField(help_text="option values per block, split, reasoning, assumptions with sources")
    nodes = models.ManyToManyField(Node, through="DispositionAssignment", related_name="disposition_plans")

    class Meta:
        db_table = "fleet_dispositionplan"
        ordering = ["-created_at"]


class DispositionAssignment(models.Model):
    """Which option (and pool) the plan gives one node."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    plan = models.ForeignKey(DispositionPlan, on_delete=models.CASCADE, related_name="assignments")
    node = models.ForeignKey(Node, on_delete=models.PROTECT, related_name="disposition_assignments")
    option = models.CharField(max_length=8, choices=DispositionOption.choices)
    pool = models.CharField(max_length=100, blank=True)
    constraint = models.CharField(
        max_length=120,
        blank=True,
        help_text="what decided this node: best_return, pool:<name>, lease_market, lease_cap, resale_depth, "
        "migration_drain",
    )

    class Meta:
        db_table = "fleet_dispositionassignment"
        constraints = [models.UniqueConstraint(fields=["plan", "node"], name="fleet_disposition_one_per_node")]

    def __str__(self) -> str:
        return f"{self.node_id} → {self.option}"


class MigrationPlan(BaseModel):
    """A stored generation-migration plan: the canonical inputs it was computed from and the
    planner's answer. Applying it schedules the work in the inventory (``PlannedAction``)."""

    class Status(models.TextChoices):
        DRAFT = "draft", "Draft"
        APPLIED = "applied", "Applied"

    class Computation(models.TextChoices):
        """Where the planner's answer stands: small plans are computed in the request (done at
        once); large ones are queued for a worker, which reports its progress as it runs."""

        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"

    name = models.CharField(max_length=100, validators=[validate_display_text])
    created_by = models.CharField(max_length=200, help_text="actor who created it (user:NAME or token:ID)")
    inputs = models.JSONField(help_text="operator parameters and the resolved planner inputs (canonical JSON)")
    result = models.JSONField(
        null=True,
        blank=True,
        help_text="the serialised plan: verdicts, phases, timeline, naive sequences, fixes (null until computed)",
    )
    feasible = models.BooleanField(null=True, help_text="null until computed")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.DRAFT)
    applied_at = models.DateTimeField(null=True, blank=True)
    computation = models.CharField(max_length=8, choices=Computation.choices, default=Computation.DONE)
    progress = models.FloatField(default=1.0, help_text="fraction of the planner's work done (0..1), as it reports")
    computation_error = models.TextField(blank=True, help_text="why the computation failed, for the operator")
    computed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "fleet_migrationplan"
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return self.name

    def drain_node_ids(self) -> list:
        """The nodes this plan decommissions: known once it is applied and its work scheduled."""
        return list(self.actions.filter(kind="decommission", node__isnull=False).values_list("node_id", flat=True))


class PlannedAction(BaseModel):
    """Work an applied migration plan scheduled: a facility upgrade, a node intake into a rack,
    or the decommission of a drained node. ``key`` makes applying a plan twice a no-op."""

    class Kind(models.TextChoices):
        FACILITY_UPGRADE = "facility_upgrade", "Facility upgrade"
        NODE_INTAKE = "node_intake", "Node intake"
        DECOMMISSION = "decommission", "Decommission"

    plan = models.ForeignKey(MigrationPlan, on_delete=models.CASCADE, related_name="actions")
    key = models.CharField(max_length=200, help_text="what this action is within its plan (unique per plan)")
    kind = models.CharField(max_length=20, choices=Kind.choices)
    rack = models.ForeignKey(Rack, on_delete=models.PROTECT, related_name="planned_actions")
    node = models.ForeignKey(Node, null=True, blank=True, on_delete=models.PROTECT, related_name="planned_actions")
    node_type = models.ForeignKey(
        NodeType, null=True, blank=True, on_delete=models.PROTECT, related_name="planned_actions"
    )
    nodes = models.PositiveIntegerField(default=0)
    gpus = models.PositiveIntegerField(default=0)
    starts_on = models.DateField()
    ends_on = models.DateField(help_text="upgrade ready / intake in service / node shipped")
    detail = models.TextField(blank=True)

    class Meta:
        db_table = "fleet_plannedaction"
        ordering = ["starts_on", "kind", "key"]
        constraints = [models.UniqueConstraint(fields=["plan", "key"], name="fleet_plannedaction_plan_key_unique")]
        indexes = [models.Index(fields=["rack", "starts_on"], name="fleet_plannedaction_rack_idx")]

    def __str__(self) -> str:
        return f"{self.kind} {self.key} {self.starts_on}"


class CapacityPlan(BaseModel):
    """A capacity plan: a traffic forecast and a model sized into GPUs, racks and kW per
    generation per month, with the gap to the current fleet (inputs and answer stored as data)."""

    name = models.CharField(max_length=200, validators=[validate_display_text])
    created_by = models.CharField(max_length=200)
    inputs = models.JSONField(help_text="model, forecast months, target GPU model, measured operating points")
    result = models.JSONField(help_text="per month and generation: replicas, GPUs, racks, kW; gap; deliveries")
    migration_plan = models.ForeignKey(
        MigrationPlan,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="capacity_plans",
        help_text="the migration plan made from its gap",
    )

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.name
