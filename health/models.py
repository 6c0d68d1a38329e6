"""Health state: conditions (latest per node/GPU/signal plus bounded history), check results
and incidents."""

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from core.ids import uuid7
from core.models import BaseModel
from core.validators import validate_display_text
from fleet.choices import Attribution

from .choices import (
    CheckName,
    CheckStatus,
    ConditionEventKind,
    ConditionStatus,
    IncidentOpener,
    IncidentScope,
    IncidentState,
    IncidentStep,
    PagingKind,
    PagingTier,
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
            models.UniqueConstraint(
                fields=["node", "gpu_index", "signal"],
                condition=models.Q(gpu_index__isnull=False),
                name="health_condition_gpu_unique",
            ),
            models.UniqueConstraint(
                fields=["node", "signal"],
                condition=models.Q(gpu_index__isnull=True),
                name="health_condition_node_unique",
            ),
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
    observed_at = models.DateTimeField(help_text="the agent's clock")
    received_at = models.DateTimeField(auto_now_add=True, help_text="the server's clock: what the gate compares")
    refused = models.CharField(
        max_length=40, blank=True, help_text="why the gate ignores this result (e.g. clock_skew); kept for inspection"
    )

    class Meta:
        ordering = ["-observed_at"]
        indexes = [models.Index(fields=["node", "-observed_at"], name="health_check_node_at")]


class Incident(BaseModel):
    """A node (or nodes) pulled from service: what happened, who was hit, how it ended."""

    title = models.CharField(max_length=200, validators=[validate_display_text])
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
    # correlated lapses: one incident for a shared cause (leaf, rack, site, control plane)
    scope = models.CharField(max_length=16, choices=IncidentScope.choices, default=IncidentScope.NODE, db_index=True)
    scope_key = models.CharField(max_length=200, blank=True, help_text="which leaf, rack or site")
    likely_cause = models.CharField(max_length=300, blank=True)
    paged_at = models.DateTimeField(null=True, blank=True, help_text="when on-call was paged (once per incident)")
    page_acknowledged_at = models.DateTimeField(null=True, blank=True)
    page_acknowledged_by = models.CharField(max_length=200, blank=True)
    page_escalated_at = models.DateTimeField(
        null=True, blank=True, help_text="first escalation of an unacknowledged page"
    )
    page_resolved_at = models.DateTimeField(null=True, blank=True)

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


class LapseHold(models.Model):
    """A node whose silence is put down to a shared cause: while the hold is open the node is
    `unknown` but never judged lost (no quarantine, no eviction, no RMA)."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    incident = models.ForeignKey(Incident, on_delete=models.CASCADE, related_name="holds")
    node = models.ForeignKey("fleet.Node", on_delete=models.CASCADE, related_name="lapse_holds")
    held_at = models.DateTimeField()
    silent_since = models.DateTimeField(help_text="the node's last heartbeat when it was held")
    returned_at = models.DateTimeField(null=True, blank=True, help_text="heartbeats flowed again")
    released_at = models.DateTimeField(
        null=True, blank=True, help_text="handed back to per-node judgement (its group came back, it did not)"
    )

    class Meta:
        ordering = ["held_at", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["node"],
                name="health_one_open_lapse_hold_per_node",
                condition=models.Q(returned_at__isnull=True, released_at__isnull=True),
            )
        ]

    def __str__(self) -> str:
        return f"hold of {self.node_id} in {self.incident_id}"


class FabricHold(models.Model):
    """A node whose lost fabric link is put down to its leaf switch or fabric domain: while the
    hold is open its fabric signals (ib_link, ib_port_down, ib_link_flapping) are not judged per
    node, so it is not quarantined nor sent for a cable repair (health.services.fabric)."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    incident = models.ForeignKey(Incident, on_delete=models.CASCADE, related_name="fabric_holds")
    node = models.ForeignKey("fleet.Node", on_delete=models.CASCADE, related_name="fabric_holds")
    held_at = models.DateTimeField()
    failing_since = models.DateTimeField(help_text="when the node's first fabric signal was raised")
    signals = models.JSONField(default=list, help_text="the fabric signals active when it was held")
    returned_at = models.DateTimeField(null=True, blank=True, help_text="its fabric signals cleared")
    released_at = models.DateTimeField(
        null=True, blank=True, help_text="handed back to per-node judgement (its group came back, it did not)"
    )

    class Meta:
        ordering = ["held_at", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["node"],
                name="health_one_open_fabric_hold_per_node",
                condition=models.Q(returned_at__isnull=True, released_at__isnull=True),
            )
        ]

    def __str__(self) -> str:
        return f"fabric hold of {self.node_id} in {self.incident_id}"


class RackPowerCondition(models.Model):
    """A rack drawing more than it can power and cool (usable kW) for RACK_OVER_MINUTES in a row
    (health.services.rack_power). Active until a minute's draw falls back to usable kW; the
    incident it opened names the rack, its nodes and the tenants on them."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    rack = models.ForeignKey("fleet.Rack", on_delete=models.CASCADE, related_name="power_conditions")
    status = models.CharField(max_length=8, choices=ConditionStatus.choices, default=ConditionStatus.ACTIVE)
    over_since = models.DateTimeField(help_text="first minute of the run above usable kW")
    opened_at = models.DateTimeField()
    cleared_at = models.DateTimeField(null=True, blank=True)
    usable_kw = models.DecimalField(max_digits=9, decimal_places=2)
    peak_kw = models.FloatField()
    source = models.CharField(max_length=8, help_text="how the draw was known (bmc, pdu, estimate, rated, mixed)")
    incident = models.ForeignKey(
        Incident, null=True, blank=True, on_delete=models.SET_NULL, related_name="rack_power_conditions"
    )

    class Meta:
        ordering = ["-opened_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["rack"], condition=models.Q(status="active"), name="health_rackpower_one_active"
            )
        ]

    def __str__(self) -> str:
        return f"{self.rack_id} over usable kW since {self.over_since:%Y-%m-%d %H:%M}"


class PagingChannel(BaseModel):
    """Where operators are paged (health.services.paging): PagerDuty, a signed webhook or
    e-mail; which severities; primary (at once) or escalation (after a page stayed
    unacknowledged for `escalate_after_minutes`)."""

    name = models.CharField(max_length=100, unique=True, validators=[validate_display_text])
    kind = models.CharField(max_length=12, choices=PagingKind.choices)
    tier = models.CharField(max_length=12, choices=PagingTier.choices, default=PagingTier.PRIMARY)
    min_severity = models.CharField(
        max_length=8,
        choices=[(v, label) for v, label in Severity.choices if v != Severity.INFO],
        default=Severity.WARN,
        help_text="pages incidents of this severity and worse; informational incidents page nobody",
    )
    escalate_after_minutes = models.PositiveSmallIntegerField(
        default=15,
        validators=[MinValueValidator(1), MaxValueValidator(1440)],
        help_text="escalation tier: page when a page stays unacknowledged this long",
    )
    url = models.URLField(
        max_length=500,
        blank=True,
        help_text="webhook: the receiver (HTTPS); PagerDuty: the Events API URL (empty: events.pagerduty.com)",
    )
    secret = models.CharField(
        max_length=200, blank=True, help_text="PagerDuty: the integration's routing key; webhook: the signing secret"
    )
    recipients = models.CharField(max_length=1000, blank=True, help_text="e-mail: addresses, comma-separated")
    enabled = models.BooleanField(default=True)

    class Meta:
        ordering = ["tier", "name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.get_kind_display()}, {self.tier})"
