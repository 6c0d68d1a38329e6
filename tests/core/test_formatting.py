"""The display rules of core.formatting and its template filters, pinned."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.template import Context, Template

from core import formatting as f

NOW = datetime(2026, 12, 1, 3, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("amount", "currency", "text"),
    [
        (Decimal("959.200000000000"), "USD", "959.20 USD"),
        (Decimal("1234567.891"), "USD", "1,234,567.89 USD"),
        (Decimal("0.005"), "EUR", "0.01 EUR"),  # half-up to the cent
        (Decimal("-12"), "USD", "−12.00 USD"),
        (0, "USD", "0.00 USD"),
        (None, "USD", "—"),
    ],
)
def test_money(amount, currency, text):
    assert f.format_money(amount, currency) == text


def test_unit_price_keeps_sub_cent_precision_only_when_there_is_some():
    assert f.format_unit_price(Decimal("2.490000"), "USD") == "2.49 USD / GPU-h"
    assert f.format_unit_price(Decimal("2.4875"), "USD") == "2.4875 USD / GPU-h"
    assert f.format_unit_price(Decimal("1.999999"), "USD") == "1.999999 USD / GPU-h"  # the stored precision


@pytest.mark.parametrize(
    ("hours", "text"),
    [(Decimal("22056.000000"), "22,056.0 GPU-h"), (Decimal("1.23456"), "1.23 GPU-h"), (None, "—")],
)
def test_gpu_hours(hours, text):
    assert f.format_gpu_hours(hours) == text


def test_power_and_energy_switch_units():
    assert f.format_kw(12.345) == "12.3 kW"
    assert f.format_kw(1250) == "1.25 MW"
    assert f.format_watts(700) == "700 W"
    assert f.format_watts(10200) == "10.2 kW"
    assert f.format_kwh(Decimal("1234.56")) == "1,234.6 kWh"
    assert f.format_kwh(12345) == "12.35 MWh"


def test_temperature_in_whole_degrees():
    assert f.format_celsius(54.6) == "55 °C"
    assert f.format_celsius(-3) == "−3 °C"
    assert f.format_celsius(None) == "—"
    assert Template("{{ t|celsius }}").render(Context({"t": 71.5})) == "72 °C"


def test_percent_and_ratio():
    assert f.format_percent(42) == "42.0 %"
    assert f.format_percent(Decimal("99.95"), 2) == "99.95 %"
    assert f.format_ratio(0.4213) == "42.1 %"
    assert f.format_percent(None) == "—"


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(45, "45 s"), (11520, "3 h 12 min"), (3600, "1 h"), (190_000, "2 d 4 h"), (61, "1 min 1 s")],
)
def test_duration_shows_two_largest_units(seconds, text):
    assert f.format_duration(seconds) == text
    assert f.format_duration(timedelta(seconds=seconds)) == text


def test_age():
    assert f.format_age(NOW - timedelta(hours=3, minutes=12), now=NOW) == "3 h 12 min ago"
    assert f.format_age(None, now=NOW) == "never"
    assert f.format_age(NOW + timedelta(minutes=5), now=NOW) == "in 5 min"
    assert f.format_datetime(NOW) == "2026-12-01 03:00 UTC"


def test_filters_are_builtins_of_every_template():
    rendered = Template(
        "{{ total|money:'USD' }}|{{ q|gpu_hours }}|{{ p|percent }}|{{ s|duration }}|{{ n|count }}|{{ k|kw }}"
    ).render(Context({"total": Decimal("959.2"), "q": Decimal("22056"), "p": 5, "s": 75, "n": 2048, "k": 3}))
    assert rendered == "959.20 USD|22,056.0 GPU-h|5.0 %|1 min 15 s|2,048|3.0 kW"


def test_an_empty_chart_says_so_and_a_full_one_does_not():
    from datetime import date

    from billing.charts import daily_gpu_hours_figure
    from core.charts import NO_DATA
    from health.charts import failure_causes_figure

    empty = daily_gpu_hours_figure({}, start=date(2026, 9, 1), end=date(2026, 9, 4))
    assert [a.text for a in empty.layout.annotations] == [NO_DATA] and empty.layout.xaxis.visible is False
    assert [a.text for a in failure_causes_figure([]).layout.annotations] == [NO_DATA]
    full = daily_gpu_hours_figure(
        {"h100-sxm-8x": {date(2026, 9, 2): Decimal("16")}}, start=date(2026, 9, 1), end=date(2026, 9, 4)
    )
    assert not full.layout.annotations
