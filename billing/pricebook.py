"""The default price book, read from core/reference/economics.csv (never retyped).

Which point of each surveyed range we charge: the **upper bound**. The survey ranges span
long-contract to on-demand prices; Hangar's metered, no-commitment GPU-hours are on-demand,
which sits at the top of each range. A "floor" row (rental_b200) is used as written. SKUs
the survey has no row for are priced at the nearest surveyed generation and say so in
`source`.
"""

from decimal import Decimal

from core.reference_data import parameter

# instance-type name → (economics.csv parameter, note when the row is borrowed)
DEFAULT_SKUS: dict[str, tuple[str, str]] = {
    "a100-sxm-8x": ("rental_a100_80gb", ""),
    "h100-sxm-8x": ("rental_h100", ""),
    "h200-sxm-8x": ("rental_h200", ""),
    "b200-sxm-8x": ("rental_b200", ""),
    "b300-sxm-8x": ("rental_b200", "no survey row for B300; priced at the B200 floor"),
    "gb200-nvl72": ("rental_b200", "no survey row for GB200 NVL72; priced at the B200 floor"),
    "gb300-nvl72": ("rental_b200", "no survey row for GB300 NVL72; priced at the B200 floor"),
}


def default_price_rows() -> list[dict]:
    """One {sku, unit_price, currency, source} per default SKU."""
    rows = []
    for sku, (name, note) in DEFAULT_SKUS.items():
        ref = parameter(name)
        price: Decimal = ref.high
        source = f"economics.csv {name} = {ref.value} {ref.unit} (as of {ref.as_of}; {ref.source}); upper bound charged"
        rows.append(
            {"sku": sku, "unit_price": price, "currency": "USD", "source": source + (f"; {note}" if note else "")}
        )
    return rows
