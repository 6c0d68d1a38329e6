"""The lookup: exact and prefix matches of a query against the index, shown through each
model's registration. Fixed query count: one on the index, then one per model among the hits
(at most one per registered model), whatever the fleet's size."""

import unicodedata
import uuid
from collections import defaultdict
from dataclasses import dataclass

from django.core import signing
from django.db.models import Q

from core.errors import Invalid
from core.models import SearchEntry

from .registry import KINDS, MAX_QUERY_LENGTH, normalise

PAGE_SIZE = 50
# Above every code point a normalised value can hold (parse_query refuses unassigned ones and
# U+10FFFF is one): [q, q + TOP) is exactly the strings starting with q, compared byte-wise.
TOP = "\U0010ffff"
_CURSOR_SALT = "hangar.search.more"
_REFUSED_CATEGORIES = {"Cc", "Cs", "Co", "Cn"}  # control, surrogate, private use, unassigned


@dataclass(frozen=True)
class Result:
    kind: str
    kind_label: str
    id: str
    label: str
    url: str
    match: str  # "exact" or "prefix"
    detail: str


@dataclass(frozen=True)
class SearchPage:
    query: str  # as normalised
    results: list[Result]
    more: str | None  # cursor of the next page, or None

    @property
    def single_exact(self) -> Result | None:
        exact = [r for r in self.results if r.match == "exact"]
        return exact[0] if len(exact) == 1 else None

    def groups(self) -> list[tuple[str, list[Result]]]:
        """Results by kind: kinds with an exact match first, then in registration order;
        within a kind exact before prefix (the index order already puts them so)."""
        by_kind: dict[str, list[Result]] = defaultdict(list)
        for result in self.results:
            by_kind[result.kind].append(result)
        order = list(KINDS)
        kinds = sorted(by_kind, key=lambda k: (by_kind[k][0].match != "exact", order.index(k)))
        return [(KINDS[k][0].label, by_kind[k]) for k in kinds]


def parse_query(raw: str | None) -> str:
    """The normalised query, "" for nothing to look up. A query longer than any identifier,
    or one carrying control or unassigned characters (NUL included), is refused with a reason."""
    text = (raw or "").strip()
    if len(text) > MAX_QUERY_LENGTH:
        raise Invalid(
            f"A search is at most {MAX_QUERY_LENGTH} characters; paste one identifier (hostname, serial, UUID, …).",
            code="query_too_long",
        )
    if any(unicodedata.category(ch) in _REFUSED_CATEGORIES for ch in text):
        raise Invalid(
            "The search holds a control or unassigned character; paste the identifier as printed.",
            code="query_invalid_character",
        )
    return normalise(text)


def _encode_cursor(query: str, value: str, kind: str, object_id: str) -> str:
    return signing.dumps([query, value, kind, object_id], salt=_CURSOR_SALT, compress=True)


def _decode_cursor(query: str, cursor: str) -> tuple[str, str, str]:
    try:
        q, value, kind, object_id = signing.loads(cursor, salt=_CURSOR_SALT)
        if q != query:
            raise ValueError("cursor of another search")
        return value, kind, object_id
    except (signing.BadSignature, ValueError, TypeError):
        raise Invalid("This 'more' link belongs to another search; search again.", code="invalid_cursor") from None


def search(raw_query: str | None, *, after: str | None = None, limit: int = PAGE_SIZE) -> SearchPage:
    """Up to `limit` objects carrying an identifier equal to or starting with the query,
    exact matches first. `after` is the `more` cursor of the previous page."""
    query = parse_query(raw_query)
    if not query:
        return SearchPage(query="", results=[], more=None)
    entries = SearchEntry.objects.filter(value__gte=query, value__lt=query + TOP)
    if after:
        value, kind, object_id = _decode_cursor(query, after)
        entries = entries.filter(
            Q(value__gt=value) | Q(value=value, kind__gt=kind) | Q(value=value, kind=kind, object_id__gt=object_id)
        )
    rows = list(entries.order_by("value", "kind", "object_id").values_list("value", "kind", "object_id")[: limit + 1])
    more = _encode_cursor(query, *rows[limit - 1]) if len(rows) > limit else None
    rows = [r for r in rows[:limit] if r[1] in KINDS]  # a kind no longer registered is ignored until a rebuild
    ids_by_model: dict = defaultdict(list)
    for _value, kind, object_id in rows:
        ids_by_model[KINDS[kind][1]].append(object_id)
    described = {entry.model: entry.describe(sorted(set(ids))) for entry, ids in ids_by_model.items()}
    results = []
    for value, kind_name, object_id in rows:
        kind, entry = KINDS[kind_name]
        shown = described[entry.model].get(object_id)
        if shown is None:  # deleted in another database since it was indexed: left out, not shown stale
            continue
        results.append(
            Result(
                kind=kind.name,
                kind_label=kind.label,
                id=object_id,
                label=shown.label,
                url=shown.url,
                match="exact" if value == query else "prefix",
                detail=shown.detail,
            )
        )
    return SearchPage(query=query, results=results, more=more)


def ids_by_kind(raw_query: str | None, kinds: list[str], *, limit: int = 1000) -> dict[str, list]:
    """{kind: [object id, …]} of up to `limit` identifiers of these kinds equal to or starting
    with the query (ids as the model's primary keys: UUIDs where the id is one). One query."""
    query = parse_query(raw_query)
    if not query:
        return {}
    # unordered: (kind, value) range scans per kind, stopping at `limit` (an admin filters, it does not rank)
    rows = SearchEntry.objects.filter(kind__in=kinds, value__gte=query, value__lt=query + TOP).values_list(
        "kind", "object_id"
    )[:limit]
    found: dict[str, list] = defaultdict(list)
    for kind, object_id in rows:
        found[kind].append(_as_key(object_id))
    return dict(found)


def _as_key(object_id: str):
    try:
        return uuid.UUID(object_id)
    except ValueError:
        return object_id
