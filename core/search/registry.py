"""What can be searched: each app registers its models' identifiers here from its own
`search.py` (imported by its AppConfig.ready()), the way NetBox apps register search indexes.
Core holds the index and the lookup and knows no app: the registrations tell it which model
holds which identifier, and how to show a hit (label, page, one line of context) in one query.
"""

import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field

from django.db import models

MAX_VALUE_LENGTH = 255  # SearchEntry.value
MAX_QUERY_LENGTH = 200  # longer than any identifier we index; a 10 KB paste is refused, not scanned

# A separator is required: twelve bare hex digits may as well be a serial number.
_MAC = re.compile(r"[0-9a-f]{2}([-:.])[0-9a-f]{2}(?:\1[0-9a-f]{2}){4}")
_CISCO_MAC = re.compile(r"[0-9a-f]{4}\.[0-9a-f]{4}\.[0-9a-f]{4}")


def normalise(value) -> str:
    """The form an identifier is stored and looked up in: Unicode NFKC, trimmed, case-folded;
    a MAC address in any usual spelling (3C-EC-EF-12-34-56, 3c.ec.ef.12.34.56, 3cec.ef12.3456)
    becomes 3c:ec:ef:12:34:56, as a technician may read it off a label either way."""
    text = unicodedata.normalize("NFKC", str(value)).strip().casefold()
    if _MAC.fullmatch(text) or _CISCO_MAC.fullmatch(text):
        digits = re.sub(r"[-:.]", "", text)
        text = ":".join(digits[i : i + 2] for i in range(0, 12, 2))
    return text[:MAX_VALUE_LENGTH]


@dataclass(frozen=True)
class Kind:
    """One identifier: `name` is stored in the index, `label` shown, `attribute` read from the
    object (`pk` for the object's own id)."""

    name: str
    label: str
    attribute: str


@dataclass(frozen=True)
class Described:
    """How one hit is shown: what it is, where it opens, and a line of context (for a GPU or a
    drive: its node's lifecycle, health, rack and tenant)."""

    label: str
    url: str
    detail: str = ""


@dataclass(eq=False)  # hashed by identity: one per registered model
class SearchModel:
    model: type[models.Model]
    kinds: tuple[Kind, ...]
    # ids (strings) → {id: Described} for those that still exist; one query, whatever their number
    describe: Callable[[list[str]], dict[str, Described]]
    using: str = "default"  # the database holding the model (the index is always in `default`)
    watched: frozenset = field(init=False)

    def __post_init__(self):
        self.watched = frozenset(k.attribute for k in self.kinds if k.attribute != "pk")

    def values(self, instance) -> dict[str, str]:
        """{kind name: normalised value} of the identifiers `instance` carries now (blank ones left out)."""
        out = {}
        for kind in self.kinds:
            value = self.normalised(getattr(instance, kind.attribute))
            if value:
                out[kind.name] = value
        return out

    @staticmethod
    def normalised(raw) -> str:
        return normalise(raw) if raw not in (None, "") else ""


MODELS: dict[type[models.Model], SearchModel] = {}
KINDS: dict[str, tuple[Kind, SearchModel]] = {}  # in registration order: the order results are grouped in


def register(model, *, kinds: list[Kind], describe, using: str = "default") -> SearchModel:
    """Make `model`'s identifiers searchable. Called once per model from the owning app's search.py."""
    if model in MODELS:
        raise RuntimeError(f"{model.__name__} is registered for search twice")
    entry = SearchModel(model=model, kinds=tuple(kinds), describe=describe, using=using)
    for kind in kinds:
        if kind.name in KINDS:
            raise RuntimeError(f"search kind {kind.name} is registered twice")
        KINDS[kind.name] = (kind, entry)
    MODELS[model] = entry
    return entry
