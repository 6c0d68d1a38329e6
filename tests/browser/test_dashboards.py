"""Every dashboard page in headless Chromium: loads without console errors, charts draw data
points, charts refresh from their JSON endpoints without a reload, and a screenshot per page."""

import pytest
from django.utils import timezone

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def fleet(django_user_model):
    from devtools.services.fleet_seed import seed_fleet
    from fleet.catalogue import catalogue_rows
    from fleet.choices import Health, Lifecycle
    from fleet.models import Node, NodeType, Rack
    from fleet.services.snapshots import backfill_history

    for row in catalogue_rows():  # an earlier transactional test may have flushed the migrated catalogue
        NodeType.objects.update_or_create(slug=row["slug"], defaults=row)
    seed_fleet(gpus=1024)
    ids = list(Node.objects.order_by("hostname").values_list("id", flat=True))
    # Set-up only: a realistic spread of states and some agent power readings.
    Node.objects.filter(id__in=ids[0::3]).update(lifecycle=Lifecycle.ACTIVE)
    Node.objects.filter(id__in=ids[1::17]).update(lifecycle=Lifecycle.REPAIR, health=Health.UNHEALTHY)
    Node.objects.filter(id__in=ids[2::23]).update(health=Health.DEGRADED)
    now = timezone.now()
    Node.objects.filter(id__in=ids[4::5]).update(gpu_power_w=5_200, last_heartbeat_at=now)  # estimates
    Node.objects.filter(id__in=ids[5::7]).update(wall_power_w=10_100, wall_power_source="bmc", wall_power_at=now)
    # Two nodes at their rated 10.2 kW cannot reach 90 % of the seeded 23 kW feeds: derate a few
    # racks' feeds to 21 kW (as after losing a PDU) so the hot-rack table has rows.
    hot_racks = Node.objects.filter(id__in=ids[:6]).values_list("rack_id", flat=True)
    Rack.objects.filter(pk__in=list(hot_racks)).update(rated_power_kw=21)
    backfill_history(now=timezone.now(), days=30)
    django_user_model.objects.create_user("oncall", password="s3cret-pass", is_staff=True)


def _open(page, live_server, login, path):
    login(page, "oncall", "s3cret-pass")
    page.goto(f"{live_server.url}{path}")
    page.wait_for_load_state("networkidle")


def _points(page, chart: str) -> int:
    return page.locator(
        f"#chart-{chart} .plot-container svg .point, #chart-{chart} .plot-container svg path.js-line"
    ).count()


def test_overview(page, live_server, login, screenshot, fleet):
    _open(page, live_server, login, "/?refresh=2")
    assert page.locator("#kpi-total").inner_text() == "1,024"
    for chart in ("utilisation-24h", "utilisation-30d", "gpus-by-state"):
        assert _points(page, chart) > 0, chart
    with page.expect_response(lambda r: "/fleet/charts/gpus-by-state.json" in r.url and r.status == 200):
        pass
    # a selector, not wait_for_function: the page's Content-Security-Policy forbids evaluating strings
    page.locator("#chart-gpus-by-state[data-refreshes]").wait_for()
    assert _points(page, "gpus-by-state") > 0  # redrawn in place, still showing data
    screenshot(page, "dashboard-overview")
    assert page.console_errors == []


def test_power(page, live_server, login, screenshot, fleet):
    _open(page, live_server, login, "/fleet/power/?refresh=2")
    for chart in ("hall-power", "rack-load"):
        assert _points(page, chart) > 0, chart
    assert page.locator("#hot-racks tbody tr.hot").count() > 0
    assert "GB200-NVL72" in page.locator("#placement").inner_text()
    page.locator("#chart-rack-load[data-refreshes]").wait_for()
    screenshot(page, "dashboard-power")
    assert page.console_errors == []


def test_floor_map_and_rack_elevation(page, live_server, login, screenshot, fleet):
    from fleet.models import Hall

    hall = Hall.objects.get(name="hall-1")
    _open(page, live_server, login, f"/fleet/halls/{hall.pk}/floor/")
    racks = page.locator("#floormap svg a.rack")
    assert racks.count() == 64
    screenshot(page, "dashboard-floor-power")
    page.click("#color-toggle >> text=health")
    page.wait_for_load_state("networkidle")
    assert "color=health" in page.url
    screenshot(page, "dashboard-floor-health")
    racks.first.click()
    page.wait_for_load_state("networkidle")
    assert "/fleet/racks/" in page.url
    assert page.locator("#elevation svg a.node").count() == 2
    assert page.locator("#elevation svg rect.slot").count() == 42
    assert page.locator("#elevation svg a.node").first.get_attribute("href").startswith("/fleet/nodes/")
    screenshot(page, "dashboard-rack-elevation")
    assert page.console_errors == []
