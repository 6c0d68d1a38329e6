"""What runs on each node (its software and firmware stack, as reported), the golden baseline
each node type should run, and where each node stands on the bring-up ladder.

Drift is not stored: it is the difference between a node's inventory and its type's golden
baseline, computed when read (fleet.selectors.software), so it can never go stale.
"""

import re

from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q

from core.ids import uuid7
from core.models import BaseModel
from core.validators import validate_display_text

from ..choices import ComponentState, InventorySource
from .nodes import Node, NodeType

COMPONENT_NAME_RE = r"^[a-z][a-z0-9_]{0,39}$"


class NodeSoftware(models.Model):
    """One component of a node's stack (gpu_driver, kernel, fabric_manager, ...) as one source
    last reported it. The agent reports what it reads on the host; the BMC layer will add the
    firmware inventory it reads over Redfish as source `bmc`."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="software")
    source = models.CharField(max_length=8, choices=InventorySource.choices)
    component = models.CharField(max_length=40)
    version = models.CharField(max_length=100, blank=True)
    state = models.CharField(max_length=12, choices=ComponentState.choices)
    detail = models.CharField(max_length=300, blank=True)
    observed_at = models.DateTimeField(help_text="when the source read it on the node")
    received_at = models.DateTimeField(help_text="when the control plane stored it")

    class Meta:
        ordering = ["node", "component"]
        verbose_name = "node software component"
        constraints = [
            models.UniqueConstraint(fields=["node", "source", "component"], name="fleet_nodesoftware_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.node_id} {self.component} {self.version or '-'} ({self.state})"


class SoftwareBaseline(BaseModel):
    """A named set of component versions for one node type. At most one per type is golden: the
    versions its nodes should run. Others are candidates a rollout can move nodes to."""

    node_type = models.ForeignKey(NodeType, on_delete=models.PROTECT, related_name="baselines")
    name = models.CharField(max_length=80, help_text="e.g. 2026.11 driver 570", validators=[validate_display_text])
    versions = models.JSONField(help_text='{"component": "version"}, e.g. {"gpu_driver": "570.133.20"}')
    golden = models.BooleanField(default=False)
    created_by = models.CharField(max_length=200)
    golden_set_by = models.CharField(max_length=200, blank=True)
    golden_set_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["node_type", "-created_at"]
        constraints = [
            models.UniqueConstraint(fields=["node_type", "name"], name="fleet_softwarebaseline_name_unique"),
            models.UniqueConstraint(
                fields=["node_type"], condition=Q(golden=True), name="fleet_softwarebaseline_one_golden"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.node_type.slug}: {self.name}{' (golden)' if self.golden else ''}"

    def clean(self):
        super().clean()
        errors = baseline_version_errors(self.versions)
        if errors:
            raise ValidationError({"versions": errors})


MAX_BASELINE_COMPONENTS = 32


def baseline_version_errors(versions) -> list[str]:
    """Why `versions` is not a usable {component: version} map (empty list when it is)."""
    if not isinstance(versions, dict) or not versions:
        return ['Give at least one component and its version, e.g. {"gpu_driver": "570.133.20"}.']
    if len(versions) > MAX_BASELINE_COMPONENTS:
        return [f"At most {MAX_BASELINE_COMPONENTS} components per baseline; this has {len(versions)}."]
    errors = []
    for component, version in versions.items():
        if not re.fullmatch(COMPONENT_NAME_RE, str(component)):
            errors.append(f"{str(component)[:50]!r} is not a component name (lower case, digits, _; 40 at most).")
        if not isinstance(version, str) or not version.strip() or len(version) > 100 or not version.isprintable():
            errors.append(f"{component}: the version must be printable text of 1-100 characters.")
    return errors


class NodeBringUp(models.Model):
    """Where a node in `bringing_up` stands on the ladder (fleet.services.bring_up): the step it
    is on, since when, and how many checks of that step have failed."""

    node = models.OneToOneField(Node, on_delete=models.CASCADE, primary_key=True, related_name="bring_up")
    step = models.CharField(max_length=20)
    step_started_at = models.DateTimeField()
    attempts = models.PositiveSmallIntegerField(default=0, help_text="failed checks of this step")
    next_check_at = models.DateTimeField(null=True, blank=True)
    last_result = models.TextField(blank=True)

    def __str__(self) -> str:
        return f"{self.node_id} at {self.step}"
