"""The valuation's defaults, read from the reference data (never retyped) with a citation per
field; the figures not in the reference files are stated assumptions and say so."""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal

from core.reference_data import ReferenceValue, generation, generations, parameter
from planning.engines.disposition.types import (
    Assumptions,
    PriceRange,
    gpu_family,
)


def _cite(row: ReferenceValue) -> str:
    as_of = f", {row.as_of}" if row.as_of else ""
    return f"{row.file} {row.name} = {row.value} {row.unit}: {row.source}{as_of}"


def _bounds(row: ReferenceValue) -> tuple[Decimal, Decimal]:
    if row.low is None or row.high is None:
        raise ValueError(f"{row.file} {row.name} is not a number or a range: {row.value!r}")
    return row.low, row.high


def _midpoint(row: ReferenceValue) -> Decimal:
    low, high = _bounds(row)
    return (low + high) / 2


def resale_fraction(curve: Sequence[Decimal], age_years: Decimal) -> Decimal:
    """Fraction of new price at a fractional age, linear between whole years.

    Beyond the curve's last point (4 years) it goes on falling by the curve's last yearly step
    (0.46 → 0.35: −0.11 a year, so 0.24 at 5 years and 0.13 at 6), down to nothing: holding
    the last point instead would value old hardware above anything the data shows and favour
    keeping it. Below zero there is nothing to sell; recycling is then the better exit.
    """
    if age_years <= 0:
        return curve[0]
    last = len(curve) - 1
    if age_years >= last:
        slope = curve[last] - curve[last - 1] if last > 0 else Decimal(0)
        return max(Decimal(0), curve[last] + slope * (age_years - last))
    whole = int(age_years)
    frac = age_years - whole
    return curve[whole] + (curve[whole + 1] - curve[whole]) * frac


# Stated assumptions: not in the reference CSVs, each documented in
# docs/planning.md and cited in Assumptions.sources.
_LEASE_DISCOUNT = Decimal("0.90")
_LEASE_UTILISATION = Decimal("0.6")
_REPLACEMENT_UTILISATION = Decimal("0.6")
_TYPICAL_RESALE_AGE_YEARS = Decimal("2")
_MONTHS_UNTIL_SALE = Decimal("2")
_SANITISATION_PER_DRIVE = Decimal("25")
_LOGISTICS_PER_NODE = Decimal("500")
_OPERATIONS_PER_NODE_MONTH = Decimal("150")
_SPACE_PER_RACK_MONTH = Decimal("400")
_RECYCLE_PER_NODE = Decimal("300")
_SERVICE_LIFE_YEARS = Decimal("7")


def load_default_assumptions() -> Assumptions:
    """Build the defaults from ``economics.csv``, ``facility.csv`` and
    ``generations.csv`` through the one reference loader (``core.reference_data``).

    Numbers are read, never retyped, so a corrected CSV corrects the valuation;
    derived numbers cite every row they come from.
    """
    sources: dict[str, str] = {}

    rental: dict[str, PriceRange] = {}
    rental_cites = []
    for name, family in (
        ("rental_a100_80gb", "a100"),
        ("rental_h100", "h100"),
        ("rental_h200", "h200"),
        ("rental_b200", "b200"),
    ):
        low, high = _bounds(parameter(name))
        rental[family] = PriceRange(low, high)
        rental_cites.append(_cite(parameter(name)))
    sources["rental_per_gpu_hour"] = "; ".join(rental_cites)

    sources["lease_discount"] = (
        f"assumption: a cheaper SKU is leased at {_LEASE_DISCOUNT} x the low end of "
        "its generation's rental range (older hardware, shorter commitments)"
    )
    sources["lease_utilisation"] = (
        f"assumption: {_LEASE_UTILISATION} of hours billed for a leased older SKU when leased on demand; "
        "a contracted lease bills every hour at the contracted rate, so it is not applied there"
    )

    sources["rental_breakeven_per_gpu_hour"] = _cite(parameter("rental_h100_breakeven"))
    breakeven = {"h100": _bounds(parameter("rental_h100_breakeven"))[0]}

    curve_row = parameter("resale_curve_by_age_years")
    curve = tuple(Decimal(p) for p in curve_row.value.split(","))
    sources["resale_curve"] = _cite(curve_row) + (
        "; beyond its last point it falls by the last yearly step (linear extrapolation, floored at 0)"
    )

    channel_row = parameter("resale_channel_factor")
    channels = {}
    for part in channel_row.value.split(","):
        name, value = part.split()
        channels[name] = Decimal(value)
    sources["channel_factors"] = _cite(channel_row)

    typical = resale_fraction(curve, _TYPICAL_RESALE_AGE_YEARS)
    new_price = {}
    price_cites = []
    for name, family in (("resale_used_h100_sxm", "h100"), ("resale_used_a100", "a100")):
        new_price[family] = _midpoint(parameter(name)) / typical
        price_cites.append(_cite(parameter(name)))
    sources["new_price_per_gpu"] = (
        f"derived: midpoint of the used-price range / resale curve at a typical "
        f"secondary-market age of {_TYPICAL_RESALE_AGE_YEARS} years (assumption, "
        f"{typical}); " + "; ".join(price_cites)
    )

    sources["months_until_sale"] = (
        f"assumption: {_MONTHS_UNTIL_SALE} months from decision to sale (drain, sanitise, list, ship)"
    )

    electricity = _bounds(parameter("electricity_price"))[0]
    sources["electricity_usd_per_kwh"] = _cite(parameter("electricity_price"))
    pue = _bounds(parameter("pue_industry_average"))[0]
    sources["pue"] = _cite(parameter("pue_industry_average"))
    all_in = _bounds(parameter("all_in_kw_per_h100_gpu"))[0]
    sources["all_in_kw_per_gpu"] = _cite(parameter("all_in_kw_per_h100_gpu"))

    sources["sanitisation_cost_per_drive"] = (
        f"assumption: {_SANITISATION_PER_DRIVE} USD per drive for a NIST SP 800-88 "
        "purge or destroy with verification and record, labour included"
    )
    sources["logistics_cost_per_node"] = f"assumption: {_LOGISTICS_PER_NODE} USD per node to de-rack, pack and ship"
    sources["operations_cost_per_node_month"] = (
        f"assumption: {_OPERATIONS_PER_NODE_MONTH} USD per node-month for remote hands, "
        "monitoring and support share of a node kept in service"
    )
    sources["space_cost_per_rack_month"] = (
        f"assumption: {_SPACE_PER_RACK_MONTH} USD per rack-month of floor and cooling "
        "plant, energy excluded (energy is priced separately)"
    )
    sources["recycle_value_per_node"] = f"assumption: {_RECYCLE_PER_NODE} USD per node from an e-waste recycler"

    # Freed power: the wholesale rent of a kilowatt, i.e. what the kW is worth to whoever gets it.
    # Not new hardware's margin in it: that needs the new hardware's capex, which selling the
    # old node does not pay.
    colo = parameter("colocation_wholesale_kw_month")
    freed = _bounds(colo)[0]
    sources["freed_power_value_per_kw_month"] = (
        "wholesale colocation rent of a kW (not new capacity's margin, which needs its capex): " + _cite(colo)
    )
    sources["freed_kw_months_per_kw"] = (
        "from the linked migration plan: kW-months it reuses (new racks' draw beyond the hall's spare power, "
        "up to what drains free) per kW it frees; 0 when no migration plan is linked"
    )
    h100 = generation("H100-SXM5-80GB")
    h100_nameplate_per_gpu = h100.it_kw_per_gpu
    all_in_factor = all_in / h100_nameplate_per_gpu
    kw_per_gpu: dict[str, Decimal] = {}
    nameplate: dict[str, Decimal] = {}
    for row in generations():
        per_gpu = row.it_kw_per_gpu
        nameplate[gpu_family(row.gpu_model)] = per_gpu
        kw_per_gpu[gpu_family(row.gpu_model)] = per_gpu * all_in_factor
    sources["kw_per_gpu"] = (
        "generations.csv node kW / GPUs per node (rack kW / NVLink domain for rack-scale) per family, scaled by "
        f"facility.csv all_in_kw_per_h100_gpu / the H100's nameplate {h100_nameplate_per_gpu} kW "
        "(host, storage and fabric share)"
    )
    sources["nameplate_kw_per_gpu"] = "generations.csv node kW / GPUs per node, per family"
    sources["service_life_years"] = (
        f"assumption: {_SERVICE_LIFE_YEARS} years of physical service; A100s from 2020 still rent in 2026 "
        "(economics.csv rental_a100_80gb), so a node past its accounting life keeps earning"
    )
    sources["lease_on_demand"] = "operator choice: false = contracted lease billed every hour"
    sources["rank_with_freed_power"] = "operator choice: false = the split ranks options by cash"

    life_row = parameter("useful_life")
    sources["useful_life_years"] = (
        "accounting life (depreciation; reported, does not end service): midpoint of " + _cite(life_row)
    )

    return Assumptions(
        rental_per_gpu_hour=rental,
        lease_discount=_LEASE_DISCOUNT,
        lease_utilisation=_LEASE_UTILISATION,
        rental_breakeven_per_gpu_hour=breakeven,
        resale_curve=curve,
        channel_factors=channels,
        new_price_per_gpu=new_price,
        months_until_sale=_MONTHS_UNTIL_SALE,
        electricity_usd_per_kwh=electricity,
        pue=pue,
        all_in_kw_per_gpu=all_in,
        sanitisation_cost_per_drive=_SANITISATION_PER_DRIVE,
        logistics_cost_per_node=_LOGISTICS_PER_NODE,
        operations_cost_per_node_month=_OPERATIONS_PER_NODE_MONTH,
        space_cost_per_rack_month=_SPACE_PER_RACK_MONTH,
        recycle_value_per_node=_RECYCLE_PER_NODE,
        freed_power_value_per_kw_month=freed,
        useful_life_years=_midpoint(life_row),
        sources=sources,
        service_life_years=_SERVICE_LIFE_YEARS,
        kw_per_gpu=kw_per_gpu,
        nameplate_kw_per_gpu=nameplate,
    )
