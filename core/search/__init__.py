"""One search over every identifier written on the fleet's objects (docs/search.md).

Apps register their models in their own `search.py` with `register()`; the index
(core.models.SearchEntry) follows saves and deletes through signals; `search()` looks up."""

from . import index
from .index import index_objects, rebuild, remove_objects
from .registry import KINDS, MODELS, Described, Kind, normalise
from .registry import register as _register
from .selectors import PAGE_SIZE, Result, SearchPage, ids_by_kind, parse_query, search


def register(model, *, kinds: list[Kind], describe, using: str = "default"):
    """Make `model`'s identifiers searchable and keep them in step with its saves and deletes."""
    entry = _register(model, kinds=kinds, describe=describe, using=using)
    index.connect(entry)
    return entry


__all__ = [
    "KINDS",
    "MODELS",
    "PAGE_SIZE",
    "Described",
    "Kind",
    "Result",
    "SearchPage",
    "ids_by_kind",
    "index_objects",
    "normalise",
    "parse_query",
    "rebuild",
    "register",
    "remove_objects",
    "search",
]
