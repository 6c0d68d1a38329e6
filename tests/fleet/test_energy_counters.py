"""Energy counters integrated by compare-and-set: a baseline that moved on since it was read
takes nothing, a gap across an hour and a month lands in both rows of each, and integrations
add up (fleet.services.energy)."""

from datetime import UTC, datetime, timedelta

import pytest

from fleet.models import Node, NodeEnergyCounter, NodeEnergyHour, NodeEnergyMonth
from fleet.services.energy import read_baseline, record_counters

pytestmark = pytest.mark.django_db
T0 = datetime(2026, 9, 30, 23, 30, tzinfo=UTC)


@pytest.fixture
def node(small_fleet):
    return Node.objects.select_related("node_type").order_by("hostname").first()


def _take(node, at: datetime, wall_j: int, **kwargs) -> str:
    return record_counters(
        node_id=node.pk,
        now=at,
        node_kw=node.node_type.node_kw,
        host_kw=None,
        wall_energy_j=wall_j,
        wall_source="bmc",
        gpu_energy_mj={0: 1000},
        **kwargs,
    )


def test_a_gap_across_an_hour_and_a_month_lands_in_both_hours_and_both_months(node):
    assert _take(node, T0, 0) == "baseline"
    assert _take(node, T0 + timedelta(hours=1), 6000 * 3600) == "recorded"  # 6 kW for an hour
    hours = dict(NodeEnergyHour.objects.filter(node=node).values_list("hour", "it_energy_j"))
    assert hours == {
        datetime(2026, 9, 30, 23, tzinfo=UTC): 6000 * 1800,
        datetime(2026, 10, 1, 0, tzinfo=UTC): 6000 * 1800,
    }
    months = {m.month.month: (m.it_energy_j, m.seconds) for m in NodeEnergyMonth.objects.filter(node=node)}
    assert months == {9: (6000 * 1800, 1800), 10: (6000 * 1800, 1800)}


def test_integrations_add_to_the_rows_they_share(node):
    _take(node, T0, 0)
    _take(node, T0 + timedelta(minutes=10), 6000 * 600)
    _take(node, T0 + timedelta(minutes=20), 6000 * 1200)
    (hour,) = NodeEnergyHour.objects.filter(node=node)
    assert (hour.it_energy_j, hour.seconds) == (6000 * 1200, 1200)
    (month,) = NodeEnergyMonth.objects.filter(node=node)
    assert (month.it_energy_j, month.seconds) == (6000 * 1200, 1200)


def test_a_baseline_that_moved_on_since_it_was_read_takes_nothing(node):
    """Two heartbeats of one node at once: both read the same baseline; the second writer finds
    it replaced and adds nothing, so the span is counted once."""
    _take(node, T0, 0)
    stale = read_baseline(node.pk)
    assert _take(node, T0 + timedelta(minutes=10), 6000 * 600, baseline=stale) == "recorded"
    assert _take(node, T0 + timedelta(minutes=10, seconds=1), 6000 * 601, baseline=stale) == "raced"
    assert sum(NodeEnergyHour.objects.filter(node=node).values_list("it_energy_j", flat=True)) == 6000 * 600
    assert NodeEnergyCounter.objects.get(node=node).wall_energy_j == 6000 * 600
    assert _take(node, T0 + timedelta(minutes=20), 6000 * 1200) == "recorded"  # the next one covers the rest
    assert sum(NodeEnergyHour.objects.filter(node=node).values_list("it_energy_j", flat=True)) == 6000 * 1200


def test_a_refused_reading_becomes_the_baseline_and_counts_once(node):
    _take(node, T0, 0)
    assert _take(node, T0 + timedelta(minutes=10), 10**12) == "refused"
    state = NodeEnergyCounter.objects.get(node=node)
    assert (state.refused, state.wall_energy_j) == (1, 10**12)
    assert "kW the node type can draw" in state.last_refused_detail
    assert not NodeEnergyHour.objects.filter(node=node).exists()
    assert _take(node, T0 + timedelta(minutes=20), 10**12 + 6000 * 600) == "recorded"
    assert NodeEnergyCounter.objects.get(node=node).refused == 1


def test_a_year_long_gap_is_spread_over_every_hour_it_covers(node):
    """8,760 hour rows: more than one statement's worth, on SQLite's parameter limit too."""
    _take(node, T0, 0)
    assert _take(node, T0 + timedelta(days=365), 1000 * 3600 * 24 * 365) == "recorded"  # 1 kW for a year
    assert NodeEnergyHour.objects.filter(node=node).count() == 24 * 365 + 1
    assert sum(NodeEnergyHour.objects.filter(node=node).values_list("it_energy_j", flat=True)) == 1000 * 3600 * 8760
    assert sum(NodeEnergyMonth.objects.filter(node=node).values_list("seconds", flat=True)) == 3600 * 8760
