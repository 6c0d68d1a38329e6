"""What the markets can take: lease demand (nodes placed on contracts per month, vacancy, the
ramp to the first lease, price decay, contract length) and resale depth per GPU generation.

The bounds are reference data (``economics.csv``, each row with its source or saying it is an
assumption), read through the one loader; an operator may override any of them for one plan,
and must give the reason, which the plan then shows in place of the source.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal

from core.reference_data import parameter

# economics.csv rows of the lease and resale markets; the per-family ones end in the family.
FAMILIES = ("a100", "h100")
LEASE_ABSORPTION = "lease_absorption_"
RESALE_DEPTH = "resale_depth_"
SCALARS = (
    "lease_vacancy",
    "lease_ramp_months",
    "lease_price_decay_per_month",
    "lease_contract_months",
)
PER_FAMILY = tuple(f"{prefix}{family}" for prefix in (LEASE_ABSORPTION, RESALE_DEPTH) for family in FAMILIES)
BOUND_NAMES = SCALARS + PER_FAMILY
# Whole numbers (nodes, months) and fractions, and what an override may be.
WHOLE = frozenset({"lease_ramp_months", "lease_contract_months", *PER_FAMILY})
FRACTIONS = frozenset({"lease_vacancy", "lease_price_decay_per_month"})
MAX_WHOLE = 100_000


@dataclass(frozen=True)
class MarketBound:
    """One bound, its unit and where it comes from (the CSV's source, or the operator's reason)."""

    name: str
    value: Decimal
    unit: str
    source: str
    overridden: bool = False

    def as_dict(self) -> dict:
        return {
            "name": self.name,
            "value": str(self.value),
            "unit": self.unit,
            "source": self.source,
            "overridden": self.overridden,
        }


@dataclass(frozen=True)
class Market:
    """The bounds the split respects. ``lease_absorption(family)`` nodes may start a lease in
    each month from ``lease_ramp_months`` on; ``resale_depth(family)`` nodes may be sold in
    each month."""

    bounds: Mapping[str, MarketBound] = field(default_factory=dict)

    def value(self, name: str) -> Decimal:
        return self.bounds[name].value

    def _per_family(self, prefix: str, family: str, what: str) -> int:
        name = prefix + family
        if name not in self.bounds:
            raise ValueError(
                f"no {what} for the {family} family ({name} is not in economics.csv); "
                f"the markets of {', '.join(FAMILIES)} are known"
            )
        return int(self.bounds[name].value)

    def lease_absorption(self, family: str) -> int:
        return self._per_family(LEASE_ABSORPTION, family, "lease absorption")

    def resale_depth(self, family: str) -> int:
        return self._per_family(RESALE_DEPTH, family, "resale depth")

    @property
    def vacancy(self) -> Decimal:
        return self.value("lease_vacancy")

    @property
    def ramp_months(self) -> int:
        return int(self.value("lease_ramp_months"))

    @property
    def price_decay(self) -> Decimal:
        return self.value("lease_price_decay_per_month")

    @property
    def contract_months(self) -> int:
        return max(1, int(self.value("lease_contract_months")))

    def as_list(self) -> list[dict]:
        return [self.bounds[name].as_dict() for name in BOUND_NAMES if name in self.bounds]


def _cite(name: str) -> MarketBound:
    row = parameter(name)
    if row.low is None:
        raise ValueError(f"{row.file} {name} is not a number: {row.value!r}")
    as_of = f", {row.as_of}" if row.as_of else ""
    return MarketBound(name, row.low, row.unit, f"{row.file} {name} = {row.value} {row.unit}: {row.source}{as_of}")


def load_market() -> Market:
    """The default bounds, from economics.csv."""
    return Market({name: _cite(name) for name in BOUND_NAMES})


def check_override(name: str, value: Decimal) -> str | None:
    """Why `value` cannot stand for `name`, or None when it can."""
    if name not in BOUND_NAMES:
        return f"unknown market bound {name}; known: {', '.join(BOUND_NAMES)}"
    if value < 0:
        return "must not be negative"
    if name in WHOLE and (value != value.to_integral_value() or value > MAX_WHOLE):
        return f"must be a whole number up to {MAX_WHOLE:,}"
    if name in FRACTIONS and value >= 1:
        return "must be a fraction below 1"
    return None


def override_market(market: Market, overrides: Mapping[str, Decimal], reason: str) -> Market:
    """The market with the operator's values, each citing the reason in place of its source."""
    if overrides and not reason.strip():
        raise ValueError("say why the market bounds are overridden (override_reason)")
    bounds = dict(market.bounds)
    for name, value in overrides.items():
        problem = check_override(name, Decimal(value))
        if problem:
            raise ValueError(f"{name}: {problem}")
        base = bounds[name]
        value = Decimal(int(value)) if name in WHOLE else Decimal(value).normalize()
        bounds[name] = replace(
            base,
            value=value,
            source=f"overridden by the operator ({reason.strip()}); default {base.value}",
            overridden=True,
        )
    return Market(bounds)
