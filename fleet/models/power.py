"""Power and energy kept over time: per-node energy counters and hourly energy, power history
points and fleet snapshots."""

from decimal import Decimal

from django.db import models

from ..choices import (
    EnergySource,
    WallPowerSource,
)
from .facility import Hall, Rack, Site
from .nodes import Node


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


class NodeEnergyMonth(models.Model):
    """The sum of one node's NodeEnergyHour rows in one UTC month and source, kept in step with
    them in the same transaction (fleet.services.energy), so a month's energy is one row per
    node instead of ~720 (tenants.energy reads it for months an allocation held a node whole)."""

    id = models.BigAutoField(primary_key=True)
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="energy_months")
    month = models.DateField(help_text="first day of the UTC month")
    source = models.CharField(max_length=8, choices=EnergySource.choices)
    it_energy_j = models.BigIntegerField(default=0, help_text="node wall (IT) energy (J)")
    gpu_energy_j = models.BigIntegerField(default=0, help_text="of which GPU board energy (J)")
    seconds = models.PositiveIntegerField(default=0, help_text="seconds of the month the counters cover")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["node", "month", "source"], name="fleet_energymonth_unique")]
        indexes = [models.Index(fields=["month", "node"], name="fleet_energymonth_month_idx")]

    def __str__(self) -> str:
        return f"{self.node_id} {self.month:%Y-%m} {self.source}"


class GridIntensityHour(models.Model):
    """A site's grid carbon intensity in one UTC hour, from a profile an operator uploaded
    (fleet.services.grid_profile). Hours without a row use the site's constant."""

    id = models.BigAutoField(primary_key=True)
    site = models.ForeignKey(Site, on_delete=models.CASCADE, related_name="grid_intensity_hours")
    hour = models.DateTimeField(help_text="start of the UTC hour")
    kg_co2e_per_kwh = models.DecimalField(max_digits=6, decimal_places=4)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["site", "hour"], name="fleet_gridhour_unique")]

    def __str__(self) -> str:
        return f"{self.site_id} {self.hour:%Y-%m-%d %H}h {self.kg_co2e_per_kwh}"


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
