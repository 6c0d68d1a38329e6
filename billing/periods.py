"""Billing periods are calendar months in UTC, written `YYYY-MM`; stored as their first day."""

import re
from datetime import UTC, date, datetime

_PERIOD = re.compile(r"^(\d{4})-(0[1-9]|1[0-2])$")


def parse_period(text: str) -> date:
    """`"2026-11"` → date(2026, 11, 1); ValueError for anything else."""
    match = _PERIOD.match(text or "")
    if match is None:
        raise ValueError("a period is written YYYY-MM, e.g. 2026-11")
    return date(int(match.group(1)), int(match.group(2)), 1)


def format_period(period: date) -> str:
    return f"{period:%Y-%m}"


def period_of(moment: datetime) -> date:
    moment = moment.astimezone(UTC)
    return date(moment.year, moment.month, 1)


def next_period(period: date) -> date:
    return date(period.year + period.month // 12, period.month % 12 + 1, 1)


def previous_period(period: date) -> date:
    return date(period.year - (period.month == 1), 12 if period.month == 1 else period.month - 1, 1)


def period_start(period: date) -> datetime:
    return datetime(period.year, period.month, 1, tzinfo=UTC)


def period_end(period: date) -> datetime:
    return period_start(next_period(period))
