"""What the migration planner is given: positions, halls, node types, the fleet, deliveries,
upgrades and the operator's floors (frozen dataclasses; defaults from ``core/reference``)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import date, timedelta
from decimal import Decimal
from typing import Literal

from core.reference_data import generation as reference_generation
from core.reference_data import parameter

PositionCooling = Literal["air", "rear_door", "liquid"]
CoolingNeed = Literal["air", "liquid", "air-or-liquid"]
VerdictStatus = Literal["ok_now", "after_upgrade", "never"]
PhaseKind = Literal["facility_prep", "land", "burn_in", "cut_over", "drain", "sanitise", "ship"]
Workload = Literal["training", "inference"]

PLAN = "plan"
DECOMMISSION_FIRST = "decommission_first"
ONE_FOR_ONE_SWAP = "one_for_one_swap"
WORKLOADS: tuple[Workload, ...] = ("training", "inference")
DAYS_PER_MONTH = Decimal(365) / Decimal(12)
EPS = 1e-9


@dataclass(frozen=True)
class Assumption:
    """A number the plan used, with where it came from (a reference row or the operator)."""

    name: str
    value: str
    unit: str
    source: str


@dataclass(frozen=True)
class FacilityUpgrade:
    """Work that lets a position take more power/cooling, ready ``lead_time_days`` after it starts."""

    kind: str
    lead_time_days: int
    earliest_start: date
    adds_power_kw: float
    adds_cooling_kw: float
    cooling_after: PositionCooling = "liquid"
    cost: Decimal | None = None
    lead_time_source: str = "operator input"

    @property
    def ready(self) -> date:
        return self.earliest_start + timedelta(days=self.lead_time_days)

    @classmethod
    def cdu_install(
        cls,
        *,
        earliest_start: date,
        adds_power_kw: float,
        adds_cooling_kw: float,
        lead: Literal["low", "high"] = "high",
        cost: Decimal | None = None,
    ) -> FacilityUpgrade:
        """A CDU install whose lead time is the cited ``cdu_lead_time`` range (high end by default)."""
        row = parameter("cdu_lead_time")
        months = row.high if lead == "high" else row.low
        return cls(
            kind="cdu_install",
            lead_time_days=math.ceil(months * DAYS_PER_MONTH),
            earliest_start=earliest_start,
            adds_power_kw=adds_power_kw,
            adds_cooling_kw=adds_cooling_kw,
            cost=cost,
            lead_time_source=f"{row.value} {row.unit} ({lead} end): {row.source}",
        )


@dataclass(frozen=True)
class Position:
    """One rack position: what it can power and cool today, and the upgrade it may get."""

    id: str
    hall_id: str
    rack: str
    cooling: PositionCooling
    power_kw: float
    cooling_kw: float
    upgrade: FacilityUpgrade | None = None


@dataclass(frozen=True)
class Hall:
    """A hall's IT power budget and shared facility limits; ``None`` means not known (not checked).

    ``pue=None`` uses the cited industry average. ``cdu_units`` x ``cdu_unit_kw`` is the liquid
    heat the hall's coolant distribution can take; the plan counts all units but one (N+1).
    ``air_cooling_kw`` is the room-air heat the hall's air handlers remove (air racks plus the
    residual air heat of liquid racks). ``floor_load_kpa`` is the floor's rated distributed load.
    """

    id: str
    name: str
    it_power_budget_kw: float
    pue: float | None = None
    cdu_units: int | None = None
    cdu_unit_kw: float | None = None
    air_cooling_kw: float | None = None
    floor_load_kpa: float | None = None

    @property
    def cdu_usable_kw(self) -> float | None:
        if self.cdu_units is None or self.cdu_unit_kw is None:
            return None
        return max(0, self.cdu_units - 1) * self.cdu_unit_kw


@dataclass(frozen=True)
class NodeTypeSpec:
    """A node type as the planner needs it; ``rack_kw`` is set for rack-scale systems (NVL72).

    ``perf_per_gpu`` is one GPU's capacity in H100-equivalents for the plan's workload class.
    ``rack_weight_kg`` is a full rack's weight (None: not known, floor loading not checked).
    """

    name: str
    generation: str
    gpu_model: str
    gpus_per_node: int
    node_kw: float | None
    rack_kw: float | None
    cooling: CoolingNeed
    fabric: str
    nodes_per_rack: int
    perf_per_gpu: float = 1.0
    source: str = "operator input"
    perf_source: str = "operator input"
    rack_weight_kg: float | None = None
    weight_source: str = ""

    @property
    def gpus_per_rack(self) -> int:
        return self.gpus_per_node * self.nodes_per_rack

    @property
    def rack_scale(self) -> bool:
        return self.node_kw is None

    def rack_power_kw(self, nodes: int) -> float:
        """Draw of a rack holding ``nodes`` nodes (a rack-scale system scales its rack figure)."""
        if self.node_kw is None:
            assert self.rack_kw is not None
            return self.rack_kw * nodes / self.nodes_per_rack
        return self.node_kw * nodes

    @classmethod
    def from_reference(
        cls,
        gpu_model: str,
        *,
        name: str | None = None,
        nodes_per_rack: int | None = None,
        workload: Workload = "training",
        perf_per_gpu: float | None = None,
        perf_source: str | None = None,
    ) -> NodeTypeSpec:
        """Build from generations.csv; nodes per rack is rack kW / node kW, or the NVLink domain for rack-scale.

        The performance ratio is the row's ``training_vs_h100`` or ``inference_vs_h100`` unless
        the operator gives ``perf_per_gpu``.
        """
        row = reference_generation(gpu_model)
        if nodes_per_rack is None:
            if row.node_kw is None:
                nodes_per_rack = row.nvlink_domain_gpus // row.gpus_per_node
            elif row.rack_kw_typical is not None:
                nodes_per_rack = int((row.rack_kw_typical / row.node_kw).to_integral_value())
            else:
                raise ValueError(f"{gpu_model} has no rack figure in generations.csv: pass nodes_per_rack")
        if perf_per_gpu is None:
            ratio = row.training_vs_h100 if workload == "training" else row.inference_vs_h100
            if ratio is None:
                raise ValueError(f"{gpu_model} has no {workload} ratio in generations.csv: give perf_per_gpu")
            perf_per_gpu = float(ratio)
            perf_source = f"generations.csv {workload}_vs_h100: {row.perf_source}"
        weight: float | None = None
        weight_source = ""
        if row.rack_weight_kg is not None:
            weight = float(row.rack_weight_kg)
            weight_source = f"generations.csv rack_weight_kg: {row.perf_source}"
        elif row.node_weight_kg is not None:
            empty = parameter("empty_rack_weight")
            assert empty.high is not None
            weight = float(empty.high) + float(row.node_weight_kg) * nodes_per_rack
            weight_source = (
                f"{nodes_per_rack} x {row.node_weight_kg} kg nodes (generations.csv) + {empty.high} kg rack "
                f"(high end of empty_rack_weight: {empty.source})"
            )
        return cls(
            name=name or gpu_model,
            generation=row.generation,
            gpu_model=row.gpu_model,
            gpus_per_node=row.gpus_per_node,
            node_kw=float(row.node_kw) if row.node_kw is not None else None,
            rack_kw=float(row.rack_kw_typical) if row.rack_kw_typical is not None else None,
            cooling=row.cooling,  # type: ignore[arg-type]
            fabric=row.fabric,
            nodes_per_rack=nodes_per_rack,
            perf_per_gpu=perf_per_gpu,
            source=row.source,
            perf_source=perf_source or "operator input",
            rack_weight_kg=weight,
            weight_source=weight_source,
        )


@dataclass(frozen=True)
class FleetBlock:
    """Current nodes of one type, filled ``nodes_per_rack`` at a time into ``position_ids`` in order."""

    id: str
    node_type: NodeTypeSpec
    count: int
    position_ids: tuple[str, ...]


@dataclass(frozen=True)
class Delivery:
    """A shipment of the target node type arriving on ``date``."""

    date: date
    scalable_units: int
    nodes_per_unit: int
    label: str = ""

    @property
    def nodes(self) -> int:
        return self.scalable_units * self.nodes_per_unit


@dataclass(frozen=True)
class FloorStep:
    """From ``start`` on, the normalised floor is ``perf`` (a forecast's need for that month)."""

    start: date
    perf: float


@dataclass(frozen=True)
class PlanInputs:
    """Everything the plan depends on.

    ``fleet`` is what migrates; ``kept`` are racks already holding the target generation: they
    stay, occupy their positions, draw power and count as capacity. ``capacity_floor_gpus`` and
    ``capacity_floor_perf`` (in ``perf_unit``: H100-equivalents for ``workload`` unless the
    operator names another unit, e.g. a capacity plan's output tokens/s) are floors; 0/None means
    no floor in that unit. ``floor_steps``, when given, replace ``capacity_floor_perf`` with a
    floor that changes over time (before its first step, the first step's value).
    ``largest_job_gpus`` is a job of that many H100s; ``largest_job_perf`` is the same job in the
    perf unit (default: one H100-equivalent per GPU), held by one generation's pool when the pool's
    GPUs x its ratio reach it. ``burn_in_days=None`` uses the lifecycle's burn-in deadline
    (facility.csv). ``fabric_max_endpoints`` is the size of the fabric the target would join
    (default: the two-tier limit of its technology, facility.csv).
    """

    start: date
    halls: tuple[Hall, ...]
    positions: tuple[Position, ...]
    fleet: tuple[FleetBlock, ...]
    target: NodeTypeSpec
    deliveries: tuple[Delivery, ...]
    capacity_floor_gpus: int
    largest_job_gpus: int
    capacity_floor_perf: float | None = None
    horizon_weeks: int = 104
    burn_in_days: int | None = None
    cut_over_days: int = 1
    drain_days: int = 7
    sanitise_days: int = 7
    ship_days: int = 7
    power_margin: float = 0.05
    kept: tuple[FleetBlock, ...] = ()
    workload: Workload = "training"
    perf_unit: str = ""
    floor_steps: tuple[FloorStep, ...] = ()
    largest_job_perf: float | None = None
    fabric_max_endpoints: int | None = None
