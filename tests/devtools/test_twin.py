"""The fleet twin: reproducible, the Llama 3 table within its Poisson bounds, variants from one
seed, bounded input, and the live databases untouched by a run in the twin's own database."""

import io
import json
import statistics
from collections import Counter

import pytest
from django.apps import apps
from django.core.management import call_command
from django.core.management.base import CommandError
from hypothesis import given, settings
from hypothesis import strategies as st

from devtools.twin import TwinSpec, llama3_comparison, poisson_interval, run_variant
from hangar_agent.hardware.reference import load_reliability


def _spec(**given) -> TwinSpec:
    return TwinSpec.from_reference(**given)


def test_a_run_is_reproducible_from_its_seed():
    a = run_variant(_spec(nodes=64, days=120, seed=7)).as_dict()
    b = run_variant(_spec(nodes=64, days=120, seed=7)).as_dict()
    a.pop("wall_seconds"), b.pop("wall_seconds")
    assert a == b
    c = run_variant(_spec(nodes=64, days=120, seed=8))
    assert c.by_cause != a["by_cause"] or c.failures != a["failures"]


def test_54_days_of_16384_gpus_reproduce_the_llama3_table():
    """419 unexpected interruptions with the paper's cause mix; each row within its 99.9 % Poisson bounds."""
    result = run_variant(_spec(nodes=2048, days=54, seed=1, infant_failure_share=0.0))
    rows = llama3_comparison(result)
    assert rows[0]["paper"] == 419
    outside = [r for r in rows if not r["within"]]
    assert not outside, outside


def test_over_many_seeds_the_mean_count_and_the_mix_converge_on_the_paper():
    """A stronger check than one run: 20 seeds' mean within 3.3 standard errors of 419, and the
    pooled cause shares within 3.3 binomial standard errors of the published mix."""
    runs = [run_variant(_spec(nodes=2048, days=54, seed=s, infant_failure_share=0.0)) for s in range(20)]
    counts = [r.failures for r in runs]
    assert abs(statistics.mean(counts) - 419) <= 3.3 * (419 / len(runs)) ** 0.5
    pooled = sum((Counter(r.by_cause) for r in runs), Counter())
    total = sum(pooled.values())
    for cause, share in load_reliability().cause_mix.items():
        se = (share * (1 - share) / total) ** 0.5
        assert abs(pooled[cause] / total - share) <= 3.3 * se, cause


@pytest.mark.parametrize("mean", [0.5, 1, 2, 7.1, 419])
def test_poisson_bounds_hold_the_stated_mass(mean):
    import math

    low, high = poisson_interval(mean, 0.99)
    mass = sum(math.exp(-mean + k * math.log(mean) - math.lgamma(k + 1)) for k in range(low, high + 1))
    assert mass >= 0.99


@settings(max_examples=15, deadline=None)
@given(nodes=st.integers(min_value=1, max_value=40), days=st.floats(min_value=1, max_value=200))
def test_goodput_is_a_share_and_more_spares_never_mean_more_failures(nodes, days):
    """Sizes 1 and 2 included; spares change who waits, never which failures happen."""
    few = run_variant(_spec(nodes=nodes, days=days, spare_fraction=0.0, job_mix="large:1.0:4"))
    many = run_variant(_spec(nodes=nodes, days=days, spare_fraction=0.25, job_mix="large:1.0:4"))
    for r in (few, many):
        assert 0 <= r.goodput <= 1 and r.lost_gpu_hours <= r.allocated_gpu_hours
        assert all(0 <= g <= 1 for g in r.goodput_by_month)
        assert r.interruptions <= r.failures
    assert few.by_cause.keys() >= {c for c in many.by_cause if c != "infant"} or not many.by_cause


def test_4_percent_spares_wait_less_than_2_percent_on_the_demo_fleet():
    base = _spec(nodes=256, days=365)
    four, two = run_variant(base), run_variant(base.with_changes("spare_fraction=0.02"))
    assert four.spares_reserved == 10 and two.spares_reserved == 5
    assert four.replacement_wait_hours < two.replacement_wait_hours
    assert four.goodput > two.goodput and four.sla_credits < two.sla_credits


@pytest.mark.django_db(databases=["default", "ledger"])
@pytest.mark.parametrize(
    "argv",
    [
        ["--nodes", "0"],
        ["--nodes", "1000000"],
        ["--gpus", "12"],
        ["--days", "5000", "--nodes", "8"],
        ["--nodes", "8", "--variant", "x:nodes=9"],
        ["--nodes", "8", "--variant", "no-colon"],
        ["--nodes", "8", "--spares", "0.9"],
        ["--nodes", "8", "--job-mix", "a:0.5:4"],
    ],
)
def test_bad_input_is_a_clear_error(argv):
    with pytest.raises(CommandError):
        call_command("twin", *argv, "--detection", "modelled", stdout=io.StringIO())


@pytest.mark.django_db(databases=["default", "ledger"])
def test_a_replayed_run_uses_its_own_database_and_leaves_the_live_ones_as_they_were(small_fleet, tmp_path):
    before = _counts()
    out = io.StringIO()
    report = tmp_path / "twin.json"
    call_command("twin", "--days", "30", "--variant", "no spares:spare_fraction=0", "--json", str(report), stdout=out)
    assert _counts() == before
    data = json.loads(report.read_text())
    assert [v["name"] for v in data["variants"]] == ["baseline", "no spares"]
    assert data["variants"][0]["spec"]["nodes"] == 8  # seeded from the live inventory
    assert data["variants"][0]["detection"].startswith("replayed")
    assert "Twin database" in out.getvalue() and "dropped" in out.getvalue()


def _counts() -> dict:
    from django.db import router

    counts = {}
    for model in apps.get_models():
        alias = router.db_for_read(model) or "default"
        if model._meta.managed and not model._meta.proxy:
            counts[model._meta.label] = model.objects.using(alias).count()
    return counts


@pytest.mark.django_db(databases=["default", "ledger"])
def test_a_hypothetical_fleet_of_another_type_priced_at_the_live_price_book(tmp_path):
    from billing.services.rating import PriceBook
    from core import clock

    report = tmp_path / "twin.json"
    call_command(
        "twin", "--nodes", "36", "--days", "60", "--node-type", "gb200-nvl72", "--detection", "modelled",
        "--json", str(report), stdout=io.StringIO(),
    )  # fmt: skip
    spec = json.loads(report.read_text())["variants"][0]["spec"]
    assert (spec["sku"], spec["gpus_per_node"]) == ("gb200-nvl72", 4)
    assert spec["price_per_gpu_hour"] == str(PriceBook.load().price_at("gb200-nvl72", clock.now()).unit_price)
    with pytest.raises(CommandError, match="not in the catalogue"):
        call_command("twin", "--nodes", "8", "--node-type", "nope", "--detection", "modelled", stdout=io.StringIO())


@pytest.mark.django_db
def test_without_a_fleet_or_a_size_the_twin_says_what_to_give():
    with pytest.raises(CommandError, match="give --gpus or --nodes"):
        call_command("twin", "--detection", "modelled", stdout=io.StringIO())


@pytest.mark.parametrize("target", [0.5, 6, 48])
def test_spares_needed_is_the_fewest_that_meet_the_wait_target(target):
    """Oracle: a linear scan of every spare count on a small fleet."""
    from dataclasses import replace

    from devtools.twin import spares_needed

    spec = _spec(nodes=24, days=200, job_mix="large:1.0:4", seed=3)
    waits = [run_variant(replace(spec, spare_fraction=k / 24)).longest_wait_hours for k in range(13)]
    fewest = next((k for k, wait in enumerate(waits) if wait <= target), None)
    assert spares_needed(spec, target) == fewest
