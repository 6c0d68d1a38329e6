"""RFC 3339 timestamps from the outside world, always returned in UTC.

Normalising to UTC matters beyond tidiness: Python accepts offsets up to ±24 h, PostgreSQL
only up to ±15:59, so an exotic offset stored as given would be a database error (a 500)."""

from datetime import UTC, datetime


def parse_rfc3339(value) -> datetime:
    """Raises ValueError with a message fit for the API's `errors[]`."""
    if not isinstance(value, str) or "T" not in value.upper():
        raise ValueError("must be an RFC 3339 timestamp, e.g. 2026-11-29T20:00:00Z")
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ValueError("must be an RFC 3339 timestamp, e.g. 2026-11-29T20:00:00Z") from None
    if moment.tzinfo is None:
        raise ValueError("must carry a timezone (Z or an offset)")
    try:
        return moment.astimezone(UTC)
    except OverflowError:
        raise ValueError("is out of range") from None
