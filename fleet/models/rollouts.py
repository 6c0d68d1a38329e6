"""Rolling upgrades: a baseline rolled over a set of nodes in waves (fleet.services.rollouts)."""

from decimal import Decimal

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from core.ids import uuid7
from core.models import BaseModel
from core.validators import validate_display_text

from ..choices import RolloutNodeState, RolloutState
from .nodes import Node, NodeAgentAction
from .software import SoftwareBaseline


class Rollout(BaseModel):
    """Nodes moved to `baseline` a wave at a time: a canary wave first, each later wave at most
    `wave_size` nodes and at most `max_domain_share` of a fabric domain's nodes of the type, a
    node taken only while the type's free capacity stays at or above `capacity_floor_gpus`, and
    the rollout paused once more than `max_failures` nodes failed (or any canary did)."""

    name = models.CharField(max_length=120, validators=[validate_display_text])
    baseline = models.ForeignKey(SoftwareBaseline, on_delete=models.PROTECT, related_name="rollouts")
    state = models.CharField(max_length=12, choices=RolloutState.choices, default=RolloutState.RUNNING)
    canary_size = models.PositiveSmallIntegerField(default=1, validators=[MinValueValidator(1), MaxValueValidator(50)])
    wave_size = models.PositiveSmallIntegerField(default=4, validators=[MinValueValidator(1), MaxValueValidator(500)])
    max_domain_share = models.DecimalField(
        max_digits=3,
        decimal_places=2,
        default=Decimal("0.25"),
        validators=[MinValueValidator(Decimal("0.01")), MaxValueValidator(Decimal("0.50"))],
        help_text="at most this share of a fabric domain's nodes of the type in one wave",
    )
    capacity_floor_gpus = models.PositiveIntegerField(
        default=0, help_text="free (placeable) GPUs of the node type never taken below this"
    )
    max_failures = models.PositiveSmallIntegerField(default=0, help_text="failed nodes tolerated before it pauses")
    drain_minutes = models.PositiveSmallIntegerField(
        default=120, help_text="how long a busy node may keep its tenant before it is skipped (or, forced, evicted)"
    )
    force = models.BooleanField(default=False, help_text="evict tenants still on a node at the drain deadline")
    force_reason = models.CharField(max_length=500, blank=True)
    created_by = models.CharField(max_length=200)
    paused_reason = models.CharField(max_length=500, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.state})"


class RolloutNode(models.Model):
    """One node of a rollout: its wave (0 is the canary) and how far it got."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    rollout = models.ForeignKey(Rollout, on_delete=models.CASCADE, related_name="nodes")
    node = models.ForeignKey(Node, on_delete=models.PROTECT, related_name="rollout_entries")
    wave = models.PositiveSmallIntegerField()
    state = models.CharField(max_length=12, choices=RolloutNodeState.choices, default=RolloutNodeState.PENDING)
    action = models.ForeignKey(NodeAgentAction, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    deadline = models.DateTimeField(null=True, blank=True, help_text="drain deadline of a busy node")
    taken_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    detail = models.TextField(blank=True)
    # The validation gate returns a node to service uncordoned; an operator's cordon from before
    # the rollout is put back once the node is done.
    kept_cordon = models.CharField(max_length=200, blank=True, help_text="an operator's cordon reason to restore")

    class Meta:
        ordering = ["rollout", "wave", "node__hostname"]
        constraints = [models.UniqueConstraint(fields=["rollout", "node"], name="fleet_rolloutnode_unique")]
        indexes = [models.Index(fields=["rollout", "state"], name="fleet_rolloutnode_state_idx")]

    def __str__(self) -> str:
        return f"{self.node_id} wave {self.wave} ({self.state})"
