"""Turning ids from the outside world into rows without ever answering 500."""

import uuid

from django.http import Http404


def parse_uuid(value) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(value))
    except (TypeError, ValueError, AttributeError):
        return None


def uuid_or_404(value) -> uuid.UUID:
    parsed = parse_uuid(value)
    if parsed is None:
        raise Http404("no such object")
    return parsed
