"""Facility checks of a position for a rack: cooling kind, kW, the air-rack limit, a liquid
rack's residual air heat, floor loading and the hall's shared N+1 CDU; each verdict says why."""

from __future__ import annotations

from dataclasses import dataclass

from core.reference_data import parameter
from planning.engines.migration.inputs import EPS, Hall, NodeTypeSpec, Position
from planning.engines.migration.results import PositionVerdict

AIR_POSITIONS = frozenset({"air", "rear_door"})
GRAVITY = 9.80665  # m/s^2: kg on the floor -> N


def kw_text(x: float) -> str:
    return f"{x:,.1f}".rstrip("0").rstrip(".")


@dataclass(frozen=True)
class FacilityFigures:
    """Reference figures for the static and shared facility checks."""

    air_limit_kw: float
    air_limit_source: str
    rear_door_limit_kw: float
    rear_door_source: str
    residual_air_fraction: float
    residual_source: str
    footprint_m2: float
    footprint_source: str

    @classmethod
    def load(cls) -> FacilityFigures:
        air = parameter("air_cooled_rack_limit_max")
        door = parameter("rear_door_hx_rack_range")
        residual = parameter("liquid_rack_residual_air_fraction")
        foot = parameter("rack_footprint")
        assert air.high is not None and door.high is not None and residual.high is not None and foot.low is not None
        return cls(
            float(air.high),
            f"air_cooled_rack_limit_max {air.value} kW: {air.source}",
            float(door.high),
            f"rear_door_hx_rack_range {door.value} kW: {door.source}",
            float(residual.high),
            f"high end of liquid_rack_residual_air_fraction {residual.value}: {residual.source}",
            float(foot.low),
            f"rack_footprint {foot.value} m2: {foot.source}",
        )


def heat_split(spec: NodeTypeSpec, kw: float, fac: FacilityFigures, cooling: str | None = None) -> tuple[float, float]:
    """(liquid kW, air kW) a rack of ``spec`` drawing ``kw`` rejects: liquid racks leave a residual on air.

    A node type that runs either way (``air-or-liquid``) is liquid-cooled in a liquid ``cooling`` position."""
    if spec.cooling == "liquid" or (spec.cooling == "air-or-liquid" and cooling == "liquid"):
        air = kw * fac.residual_air_fraction
        return kw - air, air
    return 0.0, kw


def cooling_kind_ok(spec: NodeTypeSpec, cooling: str) -> bool:
    return spec.cooling == "air-or-liquid" or (
        cooling in AIR_POSITIONS if spec.cooling == "air" else cooling == "liquid"
    )


def position_checks(
    spec: NodeTypeSpec, cooling: str, power_kw: float, cooling_kw: float, fac: FacilityFigures
) -> list[str]:
    """Why a rack of ``spec`` does not fit a position of this cooling/power (empty: it fits)."""
    need = spec.rack_power_kw(spec.nodes_per_rack)
    failed = []
    if not cooling_kind_ok(spec, cooling):
        failed.append(f"needs {spec.cooling} cooling, the position is {cooling}")
    if need > power_kw + EPS:
        failed.append(f"needs {kw_text(need)} kW power, the position has {kw_text(power_kw)} kW")
    if need > cooling_kw + EPS:
        failed.append(f"needs {kw_text(need)} kW cooling, the position has {kw_text(cooling_kw)} kW")
    if cooling == "air" and need > fac.air_limit_kw + EPS:
        failed.append(
            f"{kw_text(need)} kW is over the air-cooled rack limit of {kw_text(fac.air_limit_kw)} kW ({fac.air_limit_source})"
        )
    if cooling == "rear_door" and need > fac.rear_door_limit_kw + EPS:
        failed.append(
            f"{kw_text(need)} kW is over the rear-door limit of {kw_text(fac.rear_door_limit_kw)} kW ({fac.rear_door_source})"
        )
    if cooling == "liquid" and spec.cooling == "liquid":
        _, air = heat_split(spec, need, fac)
        if air > fac.air_limit_kw + EPS:
            failed.append(
                f"its residual air heat of {kw_text(air)} kW is over the air-cooled rack limit of {kw_text(fac.air_limit_kw)} kW"
            )
    return failed


def static_notes(spec: NodeTypeSpec, hall: Hall | None, fac: FacilityFigures) -> tuple[list[str], list[str]]:
    """(notes, refusals) for the checks that no position upgrade changes: floor loading, hall CDU."""
    notes: list[str] = []
    refusals: list[str] = []
    need = spec.rack_power_kw(spec.nodes_per_rack)
    if spec.cooling == "liquid":
        liquid, air = heat_split(spec, need, fac)
        notes.append(f"residual air heat {kw_text(air)} kW ({fac.residual_source})")
    if hall is not None and hall.floor_load_kpa is not None and spec.rack_weight_kg is not None:
        kpa = spec.rack_weight_kg * GRAVITY / 1000 / fac.footprint_m2
        text = (
            f"floor loading {kpa:.1f} kPa ({kw_text(spec.rack_weight_kg)} kg on {fac.footprint_m2:g} m2) "
            f"against the hall's {hall.floor_load_kpa:g} kPa"
        )
        (refusals if kpa > hall.floor_load_kpa + EPS else notes).append(text)
    elif spec.rack_weight_kg is None:
        notes.append("floor loading not checked: no rack weight for this node type")
    else:
        notes.append("floor loading not checked: give the hall's floor rating (kPa)")
    if hall is not None and spec.cooling == "liquid":
        usable = hall.cdu_usable_kw
        if usable is None:
            notes.append("CDU capacity not checked: give the hall's CDU units and kW per unit")
        else:
            liquid, _ = heat_split(spec, need, fac)
            text = (
                f"hall CDUs {hall.cdu_units} x {kw_text(hall.cdu_unit_kw or 0)} kW, N+1: {kw_text(usable)} kW usable, "
                f"shared; this rack needs {kw_text(liquid)} kW of it"
            )
            (refusals if liquid > usable + EPS else notes).append(text)
    return notes, refusals


def position_verdict(spec: NodeTypeSpec, pos: Position, hall: Hall | None, fac: FacilityFigures) -> PositionVerdict:
    need = spec.rack_power_kw(spec.nodes_per_rack)
    needs = f"{spec.name} needs {kw_text(need)} kW {spec.cooling}"
    has = f"position {pos.rack} is {pos.cooling}-cooled with {kw_text(pos.cooling_kw)} kW cooling, {kw_text(pos.power_kw)} kW power"
    notes, refusals = static_notes(spec, hall, fac)
    tail = "; ".join(notes)
    now = position_checks(spec, pos.cooling, pos.power_kw, pos.cooling_kw, fac)
    if refusals:
        return PositionVerdict(
            pos.id, pos.hall_id, pos.rack, "never", None, f"{needs}; {has}: refused: " + "; ".join(refusals + now)
        )
    if not now:
        return PositionVerdict(pos.id, pos.hall_id, pos.rack, "ok_now", None, f"ok now: {needs}; {has}; {tail}")
    up = pos.upgrade
    if up is not None:
        power_after = pos.power_kw + up.adds_power_kw
        cooling_after = pos.cooling_kw + up.adds_cooling_kw
        after = position_checks(spec, up.cooling_after, power_after, cooling_after, fac)
        if not after:
            reason = (
                f"ok after {up.kind} (lead {up.lead_time_days} days: {up.lead_time_source}; "
                f"start {up.earliest_start}, ready {up.ready}): {needs}; after it the position has "
                f"{kw_text(cooling_after)} kW {up.cooling_after} cooling, {kw_text(power_after)} kW power; {tail}"
            )
            return PositionVerdict(pos.id, pos.hall_id, pos.rack, "after_upgrade", up.ready, reason)
        return PositionVerdict(
            pos.id,
            pos.hall_id,
            pos.rack,
            "never",
            None,
            f"{needs}; {has}, {kw_text(cooling_after)} kW {up.cooling_after} after {up.kind}: refused: "
            + "; ".join(after),
        )
    return PositionVerdict(pos.id, pos.hall_id, pos.rack, "never", None, f"{needs}; {has}: refused: " + "; ".join(now))
