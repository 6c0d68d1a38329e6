"""Who else holds a node type's slug by value.

A node type's slug is the SKU that price books and metering name, and those rows live in the
ledger database (billing), where no foreign key can point at the type; fleet may not import
billing either (docs/architecture.md). So the apps above fleet register a counter here from
their AppConfig.ready(), as they register identifiers with core.search, and NodeType.clean()
asks them before the slug or anything sized by it changes.
"""

from collections.abc import Callable

_COUNTERS: dict[str, Callable[[str], int]] = {}


def register(label: str, count: Callable[[str], int]) -> None:
    """`count(slug)` answers how many rows of the registering app (named by `label`, a plural
    noun such as "price-book entries") hold the slug."""
    _COUNTERS[label] = count


def users_of(slug: str) -> dict[str, int]:
    """label → rows holding `slug`, for the registered counters that find any."""
    found = {label: count(slug) for label, count in _COUNTERS.items()}
    return {label: n for label, n in found.items() if n}
