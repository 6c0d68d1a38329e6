"""The one place numbers become text for people.

Every page and chart that shows money, GPU-hours, power, percentages, durations or ages calls
these functions (templates through the filters in ``core/templatetags/formatting.py``, which are
template builtins). Exact values stay exact in the API and in CSV exports; these functions are
for display only and never feed a computation.

Rules (pinned by tests/core/test_formatting.py):

- ``format_money(Decimal("959.2"), "USD")`` → ``"959.20 USD"``: two decimals (half-up to the
  cent), thousands separators, the currency code after the amount, a real minus sign for credits.
- ``format_gpu_hours(Decimal("22056"))`` → ``"22,056.0 GPU-h"``: two decimals below 100, one
  from 100 up.
- ``format_kw(12.345)`` → ``"12.3 kW"``; from 1,000 kW up → ``"1.25 MW"``. ``format_watts``
  takes watts and does the same. ``format_celsius(54.6)`` → ``"55 °C"``.
- ``format_percent(42.0)`` → ``"42.0 %"`` (a value already in percent); ``format_ratio(0.42)``
  for a fraction.
- ``format_duration(11520)`` → ``"3 h 12 min"``; ``format_age(moment)`` → ``"3 h 12 min ago"``.
- ``format_count(1234)`` → ``"1,234"``; ``format_datetime(moment)`` → ``"2026-12-01 23:03 UTC"``.

``None`` (or an empty string) becomes an em dash, so a missing figure never reads as zero.
"""

from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation

from django.utils import timezone

MISSING = "—"
MINUS = "−"  # U+2212: reads as a minus, not a hyphen


def _decimal(value) -> Decimal | None:
    if value is None or value == "":
        return None
    if isinstance(value, Decimal):
        return value
    try:
        return Decimal(str(value))
    except (InvalidOperation, ValueError):
        return None


def format_number(value, decimals: int = 0) -> str:
    """Thousands separators and a fixed number of decimals (half-up), e.g. 1234.5 → "1,234.50"."""
    number = _decimal(value)
    if number is None or not number.is_finite():
        return MISSING
    quantum = Decimal(1).scaleb(-decimals)
    rounded = number.quantize(quantum, rounding=ROUND_HALF_UP)
    text = f"{abs(rounded):,.{decimals}f}"
    return f"{MINUS}{text}" if rounded < 0 else text


def format_count(value) -> str:
    """A whole number with thousands separators: 2048 → "2,048"."""
    return format_number(value, 0)


def format_money(amount, currency: str = "USD") -> str:
    """959.2 → "959.20 USD"; -12 → "−12.00 USD"; two decimals, half-up to the cent."""
    text = format_number(amount, 2)
    if text == MISSING:
        return text
    return f"{text} {currency}".strip() if currency else text


def format_unit_price(amount, currency: str = "USD", unit: str = "GPU-h") -> str:
    """A price per unit: "2.49 USD / GPU-h". Prices with sub-cent precision keep every decimal the
    price book stores (6): 1.999999 stays "1.999999", never "2.0000"."""
    number = _decimal(amount)
    if number is None:
        return MISSING
    cents = number.quantize(Decimal("0.01"))
    decimals = 2 if cents == number else min(6, max(2, -number.normalize().as_tuple().exponent))
    return f"{format_number(number, decimals)} {currency} / {unit}"


def format_gpu_hours(value) -> str:
    """GPU-hours for people: 1.234 → "1.23 GPU-h", 22056 → "22,056.0 GPU-h"."""
    number = _decimal(value)
    if number is None:
        return MISSING
    decimals = 1 if abs(number) >= 100 else 2
    return f"{format_number(number, decimals)} GPU-h"


def format_kw(kilowatts) -> str:
    """Power given in kW: 12.345 → "12.3 kW"; 1250 → "1.25 MW"."""
    number = _decimal(kilowatts)
    if number is None:
        return MISSING
    if abs(number) >= 1000:
        return f"{format_number(number / 1000, 2)} MW"
    return f"{format_number(number, 1)} kW"


def format_watts(watts) -> str:
    """Power given in W: 700 → "700 W"; 10200 → "10.2 kW"; 1.3e6 → "1.30 MW"."""
    number = _decimal(watts)
    if number is None:
        return MISSING
    if abs(number) >= 1000:
        return format_kw(number / 1000)
    return f"{format_number(number, 0)} W"


def format_celsius(degrees) -> str:
    """A temperature in °C, whole degrees: 54.6 → "55 °C"."""
    text = format_number(degrees, 0)
    return text if text == MISSING else f"{text} °C"


def format_kwh(kilowatt_hours) -> str:
    """Energy given in kWh: 1234.56 → "1,234.6 kWh"; from 10,000 kWh up → "12.35 MWh"."""
    number = _decimal(kilowatt_hours)
    if number is None:
        return MISSING
    if abs(number) >= 10_000:
        return f"{format_number(number / 1000, 2)} MWh"
    return f"{format_number(number, 1)} kWh"


def format_percent(percent, decimals: int = 1) -> str:
    """A value already in percent: 42 → "42.0 %"."""
    text = format_number(percent, decimals)
    return text if text == MISSING else f"{text} %"


def format_ratio(fraction, decimals: int = 1) -> str:
    """A fraction shown as percent: 0.42 → "42.0 %"."""
    number = _decimal(fraction)
    return MISSING if number is None else format_percent(number * 100, decimals)


def format_bytes(size) -> str:
    """Bytes in binary units, one decimal from KiB up: 1536 → "1.5 KiB", 200 → "200 B"."""
    number = _decimal(size)
    if number is None or not number.is_finite():
        return MISSING
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(number) < 1024 or unit == "TiB":
            return f"{format_number(number, 0 if unit == 'B' else 1)} {unit}"
        number /= 1024
    raise AssertionError("unreachable")


def _seconds(value) -> float | None:
    if value is None or value == "":
        return None
    if isinstance(value, timedelta):
        return value.total_seconds()
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def format_duration(value) -> str:
    """Seconds (or a timedelta) as the two largest units: 11520 → "3 h 12 min", 45 → "45 s",
    190000 → "2 d 4 h"."""
    seconds = _seconds(value)
    if seconds is None:
        return MISSING
    sign = MINUS if seconds < 0 else ""
    total = int(round(abs(seconds)))
    if total < 60:
        return f"{sign}{total} s"
    days, rest = divmod(total, 86_400)
    hours, rest = divmod(rest, 3_600)
    minutes, secs = divmod(rest, 60)
    parts = [(days, "d"), (hours, "h"), (minutes, "min"), (secs, "s")]
    first = next(i for i, (amount, _) in enumerate(parts) if amount)
    shown = [f"{amount} {unit}" for amount, unit in parts[first : first + 2] if amount]
    return sign + " ".join(shown)


def format_age(moment: datetime | None, now: datetime | None = None) -> str:
    """How long ago: "3 h 12 min ago", "just now" under a second, "never" for None; a moment in
    the future reads "in 5 min"."""
    if moment is None:
        return "never"
    now = now or timezone.now()
    seconds = (now - moment).total_seconds()
    if abs(seconds) < 1:
        return "just now"
    if seconds < 0:
        return f"in {format_duration(-seconds)}"
    return f"{format_duration(seconds)} ago"


def format_datetime(moment: datetime | None) -> str:
    """A moment in UTC to the minute: "2026-12-01 23:03 UTC"."""
    if moment is None:
        return MISSING
    if timezone.is_naive(moment):
        moment = moment.replace(tzinfo=UTC)
    return f"{moment.astimezone(UTC):%Y-%m-%d %H:%M} UTC"
