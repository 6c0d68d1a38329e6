"""Keyset pagination with opaque, signed page tokens (docs/api.md, "Pagination").

Order is newest first (`created_at`, then `id`). The token carries the last row's key, the
caller's scope and a digest of the filters, signed with SECRET_KEY: a tampered token, one
minted for another tenant, or one reused with different filters is `400 invalid_page_token`.
Rows created while a client walks the pages sort before its cursor, so it never sees a
duplicate or skips a row that existed when it started.
"""

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from django.conf import settings
from django.core import signing
from django.db.models import Q, QuerySet

from .problems import Problem

_SALT = "hangar.page-token"


@dataclass(frozen=True)
class Page:
    results: list
    next_page_token: str | None


def parse_page_size(raw: str | None) -> int:
    if raw is None or raw == "":
        return settings.PAGE_SIZE_DEFAULT
    try:
        size = int(raw)
    except (TypeError, ValueError):
        size = 0
    if size < 1:
        raise Problem(
            400,
            "validation_error",
            "page_size must be a whole number of at least 1.",
            errors=[{"field": "page_size", "message": "must be an integer ≥ 1"}],
        )
    return min(size, settings.PAGE_SIZE_MAX)


def _filters_digest(filters: dict) -> str:
    canonical = json.dumps({k: str(v) for k, v in filters.items() if v not in (None, "")}, sort_keys=True)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def _decode(token: str, scope: str, filters: dict) -> tuple[datetime, UUID | int]:
    try:
        data = signing.loads(token, salt=_SALT)
        if data["s"] != scope or data["f"] != _filters_digest(filters):
            raise ValueError("token minted for another scope or filter set")
        # Ids are UUIDs, or integers for the ledger's append-only rows (adjustments).
        pk = int(data["i"]) if isinstance(data["i"], str) and data["i"].isdigit() else UUID(data["i"])
        return datetime.fromisoformat(data["t"]), pk
    except (signing.BadSignature, KeyError, ValueError, TypeError):
        raise Problem(
            400,
            "invalid_page_token",
            "This page_token is not valid for this list and filter set; start again without page_token.",
        ) from None


def _encode(created_at: datetime, pk, scope: str, filters: dict) -> str:
    return signing.dumps(
        {"t": created_at.isoformat(), "i": str(pk), "s": scope, "f": _filters_digest(filters)},
        salt=_SALT,
        compress=True,
    )


def paginate(queryset: QuerySet, *, request, scope: str, filters: dict | None = None) -> Page:
    """One page of `queryset` (newest first) for `request`'s page_size and page_token.

    `scope` is who the list belongs to (e.g. `tenant:<id>`); `filters` the query filters that
    shaped it. The caller serialises `page.results`.
    """
    filters = filters or {}
    size = parse_page_size(request.query_params.get("page_size"))
    token = request.query_params.get("page_token")
    queryset = queryset.order_by("-created_at", "-id")
    if token:
        created_at, pk = _decode(token, scope, filters)
        queryset = queryset.filter(Q(created_at__lt=created_at) | Q(created_at=created_at, id__lt=pk))
    rows = list(queryset[: size + 1])
    next_token = None
    if len(rows) > size:
        rows = rows[:size]
        last = rows[-1]
        next_token = _encode(last.created_at, last.pk, scope, filters)
    return Page(results=rows, next_page_token=next_token)
