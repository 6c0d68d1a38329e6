"""Health state: conditions (latest per node/GPU/signal plus bounded history), check results
and incidents."""
from django.db import models

from core.ids import uuid7
from core.models import BaseModel
from fleet.choices import Attribution

from .choices import (
    CheckName,
    CheckStatus,
    ConditionEventKind,
    ConditionStatus,
    IncidentOpener,
    IncidentState,
    IncidentStep,
    Severity,
)


class Condition(models.Model):
    """The latest state of one signal on one node (gpu_index NULL) or one of its GPUs.

    One row per (node, gpu, signal) however many heartbeats report it: heartbeats update
    `last_seen` and `count`, they never append rows. History lives in ConditionEvent.
    """

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    node = models.ForeignKey("fleet.Node", on_delete=models.CASCADE, related_name="conditions")
    gpu_index = models.PositiveSmallIntegerField(null=True, blank=True)
    signal = models.CharField(max_length=40)
    severity = models.CharField(max_length=8, choices=Severity.choices)
    status = models.CharField(max_length=8, choices=ConditionStatus.choices, default=ConditionStatus.ACTIVE)
    first_seen = models.DateTimeField()
    last_seen = models.DateTimeField()
    count = models.PositiveIntegerField(default=1)
    detail = models.CharField(max_length=300, blank=True)

    class Meta:
        ordering = ["node_id", "gpu_index", "signal"]
        constraints = [
            # NULLs are distinct in a plain unique index, so node-level and GPU-level rows need one each.
            models.UniqueConstraint(fields=["node", "gpu_index", "signal"], condition=models.Q(gpu_index__isnull=False),
                                    name="health_condition_gpu_unique"),
            models.UniqueConstraint(fields=["node", "signal"], condition=models.Q(gpu_index__isnull=True),
                                    name="health_condition_node_unique"),
        ]
        # The sweep asks "does this node have an active condition of severity X" per node.
        indexes = [models.Index(fields=["node", "status", "severity"], name="health_condition_node_active")]

    def __str__(self) -> str:
        where = f"gpu{self.gpu_index}" if self.gpu_index is not None else "node"
        return f"{self.signal} on {self.node_id} {where} ({self.status})"


class ConditionEvent(models.Model):
    """Bounded history: a condition raised or cleared. The sweep prunes rows older than
    `HISTORY_RETENTION` (health.policy)."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    node = models.ForeignKey("fleet.Node", on_delete=models.CASCADE, related_name="condition_events")
    gpu_index = models.PositiveSmallIntegerField(null=True, blank=True)
    signal = models.CharField(max_length=40)
    severity = models.CharField(max_length=8, choices=Severity.choices)
    kind = models.CharField(max_length=8, choices=ConditionEventKind.choices)
    at = models.DateTimeField(db_index=True)
    detail = models.CharField(max_length=300, blank=True)

    class Meta:
        ordering = ["-at"]
        indexes = [models.Index(fields=["node", "signal", "-at"], name="health_condevent_node_sig")]


class HealthCheckResult(models.Model):
    """One check the agent ran (health-reports)."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    node = models.ForeignKey("fleet.Node", on_delete=models.CASCADE, related_name="check_results")
    name = models.CharField(max_length=20, choices=CheckName.choices)
    status = models.CharField(max_length=4, choices=CheckStatus.choices)
    detail = models.TextField(blank=True)
    observed_at = models.DateTimeField()
    received_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-observed_at"]
        indexes = [models.Index(fields=["node", "-observed_at"], name="health_check_node_at")]


class Incident(BaseModel):
    """A node (or nodes) pulled from service: what happened, who was hit, how it ended."""

    title = models.CharField(max_length=200)
    opened_by = models.CharField(max_length=8, choices=IncidentOpener.choices)
    state = models.CharField(max_length=12, choices=IncidentState.choices, default=IncidentState.OPEN, db_index=True)
    severity = models.CharField(max_length=8, choices=Severity.choices)
    signals = models.JSONField(default=list, blank=True, help_text="the signals that opened it")
    nodes = models.ManyToManyField("fleet.Node", related_name="incidents")
    opened_at = models.DateTimeField()
    closed_at = models.DateTimeField(null=True, blank=True)
    # postmortem
    impact_gpu_hours = models.DecimalField(max_digits=12, decimal_places=2, null=True, blank=True)
    cause = models.TextField(blank=True)
    attribution = models.CharField(max_length=16, choices=Attribution.choices, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return self.title


class IncidentImpact(models.Model):
    """A tenant allocation that lost a node to the incident, and the provider-attributed window."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    incident = models.ForeignKey(Incident, on_delete=models.CASCADE, related_name="impacts")
    node = models.ForeignKey("fleet.Node", on_delete=models.PROTECT, related_name="incident_impacts")
    allocation = models.ForeignKey("tenants.Allocation", on_delete=models.PROTECT, related_name="incident_impacts")
    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.PROTECT, related_name="incident_impacts")
    gpus = models.PositiveSmallIntegerField()
    start = models.DateTimeField()
    end = models.DateTimeField(null=True, blank=True)
    credited = models.BooleanField(default=False)

    class Meta:
        ordering = ["start"]


class IncidentEvent(models.Model):
    """The incident's timeline: detect, stabilise, diagnose, repair, return (and notes)."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    incident = models.ForeignKey(Incident, on_delete=models.CASCADE, related_name="events")
    at = models.DateTimeField()
    step = models.CharField(max_length=10, choices=IncidentStep.choices)
    actor = models.CharField(max_length=200)
    detail = models.TextField(blank=True)

    class Meta:
        ordering = ["at", "id"]
