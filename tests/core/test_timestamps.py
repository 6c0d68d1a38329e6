"""Timestamps from clients are normalised to UTC; what PostgreSQL could not store is a 400."""

from datetime import UTC, datetime

import pytest

from core.api.timestamps import parse_rfc3339


def test_offsets_are_normalised_to_utc():
    assert parse_rfc3339("2026-11-29T21:37:00+21:37") == datetime(2026, 11, 29, 0, 0, tzinfo=UTC)
    assert parse_rfc3339("2026-11-29T20:00:00Z").tzinfo is UTC


@pytest.mark.parametrize(
    "bad", ["2026-11-29", "2026-11-29T20:00:00", "yesterday", None, 5, "0001-01-01T00:00:00+01:00"]
)
def test_malformed_zoneless_or_unrepresentable_values_are_refused(bad):
    with pytest.raises(ValueError):
        parse_rfc3339(bad)
