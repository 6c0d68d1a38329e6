"""Where hardware lives: sites, halls, racks with their power and cooling, power feeds and
fabric domains. A rack must power and cool what is placed in it (`rack_errors_for_nodes`)."""

from decimal import Decimal

from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import Sum

from core.models import BaseModel
from core.reference_data import parameter
from core.validators import validate_display_text

from ..choices import (
    COOLING_SATISFIES,
    Cooling,
    FabricTechnology,
)

KW = {"max_digits": 9, "decimal_places": 2, "validators": [MinValueValidator(Decimal("0"))]}


def _reference_decimal(name: str) -> Decimal:
    return parameter(name).low


def default_electricity_price() -> Decimal:
    return _reference_decimal("electricity_price")


def default_grid_carbon_intensity() -> Decimal:
    return _reference_decimal("grid_carbon_intensity_us_average")


def default_pue() -> Decimal:
    return _reference_decimal("pue_industry_average")


class Site(BaseModel):
    """A data-centre campus, with what its energy costs and emits."""

    slug = models.SlugField(max_length=50, unique=True)
    name = models.CharField(max_length=100, unique=True, validators=[validate_display_text])
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
    # The site's PUE, not a hall's: the utility meters the site, and its overhead (chillers,
    # UPS losses, lighting) is shared by every hall, so facility kWh and the facility power
    # figure are IT × this one number.
    pue = models.DecimalField(
        max_digits=4,
        decimal_places=2,
        default=default_pue,
        validators=[MinValueValidator(Decimal("1"))],
        help_text="power usage effectiveness of the site: facility kWh = IT kWh × PUE; "
        "default facility.csv pue_industry_average",
    )

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Hall(BaseModel):
    """A data hall with an IT power budget; facility power is IT power × PUE."""

    site = models.ForeignKey(Site, on_delete=models.PROTECT, related_name="halls")
    name = models.CharField(max_length=100, validators=[validate_display_text])
    it_power_budget_kw = models.DecimalField(**KW, help_text="IT power the hall's electrical plant can deliver (kW)")
    pue = models.DecimalField(
        max_digits=4,
        decimal_places=2,
        default=Decimal("1.58"),
        validators=[MinValueValidator(Decimal("1"))],
        help_text="the hall's design PUE, an input of the migration planner only; metered figures "
        "(facility kW, facility kWh) use the site's PUE",
    )
    grid_columns = models.PositiveSmallIntegerField(default=16, help_text="racks per row on the floor map")

    class Meta:
        ordering = ["site__name", "name"]
        constraints = [models.UniqueConstraint(fields=["site", "name"], name="fleet_hall_site_name_unique")]

    def __str__(self) -> str:
        return f"{self.site.slug}/{self.name}"

    def placed_load_kw(self) -> Decimal:
        """The nameplate draw of every node in the hall's racks."""
        # Through the racks' reverse relation: the node models sit above this module.
        total = self.racks.aggregate(kw=Sum("nodes__node_type__node_kw"))["kw"] or 0
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
    name = models.CharField(max_length=50, validators=[validate_display_text])
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

    def placed_load_kw(self) -> Decimal:
        """The nameplate draw of the nodes in this rack."""
        return Decimal(self.nodes.aggregate(kw=Sum("node_type__node_kw"))["kw"] or 0).quantize(Decimal("0.01"))

    def clean(self):
        super().clean()
        if self.u_height is not None and self.u_height < 1:
            raise ValidationError({"u_height": "A rack is at least 1U high; a standard rack is 42U."})
        if not self.pk or self.rated_power_kw is None or self.cooling_capacity_kw is None:
            return
        errors = rack_errors_for_nodes(self, self.nodes.select_related("node_type"))
        stored_hall = Rack.objects.filter(pk=self.pk).values_list("hall_id", flat=True).first()
        if self.hall_id and stored_hall is not None and stored_hall != self.hall_id:
            # moving a rack with its nodes adds their load to the other hall
            load, hall = self.placed_load_kw(), self.hall
            if load and hall.placed_load_kw() + load > hall.it_power_budget_kw:
                errors.append(
                    f"The nodes in {self.name} draw {load} kW at nameplate; hall {hall} has a budget of "
                    f"{hall.it_power_budget_kw} kW and already carries {hall.placed_load_kw()} kW. Move nodes out first."
                )
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
    name = models.CharField(max_length=50, validators=[validate_display_text])
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

    def clean(self):
        """A feed of a rack that carries nodes must carry them alone (its A/B twin may fail): a
        change that lowers it below the rack's nameplate load is refused."""
        super().clean()
        if not self.rack_id or None in (self.voltage, self.amperage, self.max_utilization_pct):
            return
        stored = PowerFeed.objects.filter(pk=self.pk).select_related("rack").first() if self.pk else None
        if stored and stored.rack_id == self.rack_id and stored.available_kw <= self.available_kw:
            return  # takes no capacity away: an unchanged feed never blocks saving its rack
        load = self.rack.placed_load_kw()
        if load > self.available_kw:
            raise ValidationError(
                f"The nodes in rack {self.rack.name} draw {load} kW at nameplate; feed {self.name or '(new)'} would "
                f"carry {self.available_kw} kW, and each feed of a redundant pair must carry the rack alone. "
                "Move nodes out first."
            )


def weakest_feed_kw(rack: Rack) -> Decimal | None:
    """What the weakest of the rack's feeds carries (None for a rack with no feeds recorded)."""
    if rack.pk is None or rack._state.adding:
        return None
    return min((feed.available_kw for feed in rack.power_feeds.all()), default=None)


def feed_removal_errors(rack: Rack, remaining: list[PowerFeed]) -> list[str]:
    """A rack that carries nodes keeps a redundant pair: at least two feeds that each carry its
    nameplate load. `remaining` are the feeds it would have after a removal."""
    load = rack.placed_load_kw()
    if not load:
        return []
    carrying = [f for f in remaining if f.available_kw >= load]
    if len(carrying) >= 2:
        return []
    return [
        f"The nodes in rack {rack.name} draw {load} kW at nameplate; without the removed feed(s) it would keep "
        f"{len(carrying)} feed(s) able to carry that, and a rack that carries nodes keeps a redundant pair. Add "
        "the replacement feed first, or move the nodes out."
    ]


class FabricDomain(BaseModel):
    """A network fabric a job can span: an InfiniBand/RoCE pod or an NVLink domain."""

    site = models.ForeignKey(Site, on_delete=models.PROTECT, related_name="fabric_domains")
    name = models.CharField(max_length=100, validators=[validate_display_text])
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
