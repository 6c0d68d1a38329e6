"""Dashboards: numbers against independent SQL, fixed query counts at two fleet sizes, power
sources, snapshots and retention, figures and drawings as data, and /metrics."""

import json
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from core.formatting import format_kw
from devtools.services.fleet_seed import seed_fleet
from fleet import charts, drawings
from fleet.choices import Health, Lifecycle
from fleet.models import FleetSnapshot, Hall, Node, Rack, SnapshotResolution
from fleet.selectors import fleet_summary, hall_power
from fleet.services.snapshots import backfill_history, record_snapshot

pytestmark = pytest.mark.django_db

ALLOCATED = ("active", "provisioning", "releasing")
REPAIR = ("quarantined", "draining", "remediating", "validating", "triage", "repair", "rma")


def _mix_states(fleet_nodes: int) -> None:
    """Test set-up only: put nodes into a spread of states without going through transitions."""
    ids = list(Node.objects.order_by("hostname").values_list("id", flat=True))
    Node.objects.filter(id__in=ids[0::4]).update(lifecycle=Lifecycle.ACTIVE)
    Node.objects.filter(id__in=ids[1::8]).update(lifecycle=Lifecycle.PROVISIONING)
    Node.objects.filter(id__in=ids[2::8]).update(lifecycle=Lifecycle.REPAIR, health=Health.UNHEALTHY)
    Node.objects.filter(id__in=ids[3::16]).update(lifecycle=Lifecycle.QUARANTINED, health=Health.DEGRADED)


def _sql_gpus(where: str = "1=1") -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT COALESCE(SUM(t.gpus_per_node), 0) FROM fleet_node n JOIN fleet_nodetype t ON t.id = n.node_type_id "
            f"WHERE {where}"
        )
        return cursor.fetchone()[0]


def _in(states) -> str:
    return "n.lifecycle IN (" + ", ".join(f"'{s}'" for s in states) + ")"


def test_overview_numbers_match_independent_sql(operator_client):
    seed_fleet(gpus=512)
    _mix_states(64)
    summary = fleet_summary()
    assert summary.totals.total == _sql_gpus() == 512
    assert summary.totals.healthy == _sql_gpus("n.health = 'healthy'")
    assert summary.totals.allocated == _sql_gpus(_in(ALLOCATED))
    assert summary.totals.in_repair == _sql_gpus(_in(REPAIR))
    assert 0 < summary.totals.in_repair < summary.totals.allocated < summary.totals.total
    assert dict(summary.by_state)["active"] == _sql_gpus("n.lifecycle = 'active'")
    page = operator_client.get("/").content.decode()
    for kpi, value in (("total", 512), ("allocated", summary.totals.allocated), ("repair", summary.totals.in_repair)):
        assert f'id="kpi-{kpi}">{value}<' in page


@pytest.mark.parametrize("gpus", [64, 512])
def test_dashboard_pages_have_a_fixed_query_count(operator_client, django_assert_max_num_queries, gpus):
    seed_fleet(gpus=gpus)
    _mix_states(gpus // 8)
    backfill_history(now=timezone.now(), days=2)
    hall = Hall.objects.filter(racks__nodes__isnull=False).first()
    rack = Rack.objects.filter(nodes__isnull=False).first()
    budgets = {
        "/": 12,
        "/fleet/power/": 12,
        f"/fleet/halls/{hall.pk}/floor/": 8,
        f"/fleet/racks/{rack.pk}/": 8,
        "/fleet/charts/utilisation-30d.json": 4,
        "/fleet/charts/rack-load.json": 4,
    }
    for url, budget in budgets.items():
        with django_assert_max_num_queries(budget):
            assert operator_client.get(url).status_code == 200, url


OVERVIEW_QUERIES = 11  # session, user, one summary scan (with power), two history reads, six for "what is wrong now" (the loops: their passes and the scheduler's start)


@pytest.mark.parametrize("gpus", [64, 512])
def test_overview_query_count_is_the_same_at_two_fleet_sizes(operator_client, django_assert_num_queries, gpus):
    seed_fleet(gpus=gpus)
    _mix_states(gpus // 8)
    operator_client.get("/")  # the session and user reads settle on the first request
    with django_assert_num_queries(OVERVIEW_QUERIES):
        assert operator_client.get("/").status_code == 200


def test_power_counts_meter_readings_then_estimates_then_rated_and_says_which(operator_client, small_fleet):
    now = timezone.now()
    nodes = list(Node.objects.order_by("hostname"))
    # a BMC reading of the node's wall draw
    Node.objects.filter(pk=nodes[0].pk).update(
        wall_power_w=7000,
        wall_power_source="bmc",
        wall_power_at=now - timedelta(seconds=30),
        gpu_power_w=4000,
        last_heartbeat_at=now - timedelta(seconds=30),
    )
    # GPU board power only: estimated as GPUs + the H100 host share (facility.csv host_kw_max_dgx_h100, 4.6 kW)
    Node.objects.filter(pk=nodes[1].pk).update(gpu_power_w=600, last_heartbeat_at=now - timedelta(seconds=20))
    # stale readings: rated
    Node.objects.filter(pk=nodes[2].pk).update(gpu_power_w=3000, last_heartbeat_at=now - timedelta(minutes=5))
    hall = next(h for h in hall_power(now=now) if h.nodes)
    assert hall.drawn_kw == pytest.approx(6 * 10.2 + 7.0 + 0.6 + 4.6)
    assert hall.rated_kw == pytest.approx(8 * 10.2)
    assert hall.measured_nodes == 1
    assert hall.sources.counts == {"bmc": 1, "estimate": 1, "rated": 6}
    assert hall.sources.label == "mixed: 1 bmc, 1 estimate, 6 rated"
    assert hall.sources.age_seconds(now) == 30
    assert hall.facility_kw == pytest.approx(round(hall.drawn_kw * 1.58, 1))
    page = operator_client.get("/fleet/power/").content.decode()
    assert "mixed: 1 bmc, 1 estimate, 6 rated" in page
    assert "GPU power is not node power" in page
    # The overview's figures come from the summary's own scan: the same as summing the halls.
    halls = hall_power(now=now)
    summary = fleet_summary(now)
    assert summary.it_kw == round(sum(h.drawn_kw for h in halls), 1)
    assert summary.power_sources.counts == {"bmc": 1, "estimate": 1, "rated": 6}
    assert summary.power_sources.oldest_reading_at == hall.sources.oldest_reading_at
    assert fleet_summary().it_kw is None  # without `now` no power is summed
    overview = operator_client.get("/").content.decode()
    assert f'id="kpi-it-kw">{format_kw(summary.it_kw)}<' in overview and "mixed: 1 bmc, 1 estimate, 6 rated" in overview


def test_node_page_shows_wall_draw_with_its_source_apart_from_gpu_power(operator_client, small_fleet):
    node = Node.objects.order_by("hostname").first()
    Node.objects.filter(pk=node.pk).update(gpu_power_w=5200, last_heartbeat_at=timezone.now() - timedelta(seconds=12))
    page = operator_client.get(f"/fleet/nodes/{node.pk}/").content.decode()
    wall = page[page.index('id="wall-draw"') :]
    assert wall[: wall.index("</dd>")].startswith('id="wall-draw">9.8 kW') and "(estimate, 12 s old)" in wall[:200]
    gpu = page[page.index('id="gpu-power"') :]
    assert "5.2 kW, the GPUs' board power only" in gpu[:200]
    Node.objects.filter(pk=node.pk).update(last_heartbeat_at=timezone.now() - timedelta(minutes=10))
    page = operator_client.get(f"/fleet/nodes/{node.pk}/").content.decode()
    assert 'id="wall-draw">10.2 kW <span class="source">(rated)' in page


def test_power_page_names_positions_for_the_next_generation(operator_client, small_fleet):
    page = operator_client.get("/fleet/power/").content.decode()
    # The seeded liquid hall has 16 empty 140 kW positions: each takes an NVL72 rack (132 kW, generations.csv).
    row = page[page.index("GB200-NVL72") :]
    row = row[: row.index("</tr>")]
    assert ">16<" in row and "dc1/hall-2: 16" in row
    assert "rated maximum" in page  # no agent readings: the page says the figures are rated


def test_hot_racks_are_listed(operator_client, small_fleet):
    rack = Rack.objects.filter(nodes__isnull=False).distinct().order_by("name").first()
    Node.objects.filter(rack=rack).update(wall_power_w=10_800, wall_power_source="pdu", wall_power_at=timezone.now())
    page = operator_client.get("/fleet/power/").content.decode()
    table = page[page.index('id="hot-racks"') :]
    assert rack.name in table[: table.index("</table>")]
    floor = operator_client.get(f"/fleet/halls/{rack.hall_id}/floor/").content.decode()
    assert "1 at or above 90 %" in floor
    assert f'href="/fleet/racks/{rack.pk}/"' in floor


def test_floor_map_toggles_to_health(operator_client, small_fleet):
    node = Node.objects.order_by("hostname").first()
    Node.objects.filter(pk=node.pk).update(health=Health.UNHEALTHY)
    page = operator_client.get(f"/fleet/halls/{node.rack.hall_id}/floor/?color=health").content.decode()
    assert "#d64545" in page and "unhealthy" in page


def test_rack_elevation_draws_nodes_at_their_u_and_links_to_node_pages(operator_client, small_fleet):
    rack = Rack.objects.filter(nodes__isnull=False).distinct().order_by("name").first()
    page = operator_client.get(f"/fleet/racks/{rack.pk}/").content.decode()
    for node in rack.nodes.all():
        assert f'href="/fleet/nodes/{node.pk}/"' in page
    node = rack.nodes.get(u_position=2)  # an 8U H100 at U2-U9 in a 42U rack: top edge at U9
    svg = str(drawings.rack_elevation_svg(rack_name=rack.name, u_height=42, nodes=[node]))
    top_y = drawings.TOP + (42 - 9) * drawings.U_PX + 2
    assert f'y="{top_y}" width="{drawings.RACK_WIDTH - drawings.LABEL_W - 8}" height="{8 * drawings.U_PX - 4}"' in svg
    assert svg.count('class="slot"') == 42


def test_bad_ids_and_unknown_charts_are_404_and_pages_need_login(operator_client, small_fleet):
    assert operator_client.get("/fleet/racks/not-a-uuid/").status_code == 404
    assert operator_client.get("/fleet/racks/00000000-0000-0000-0000-000000000000/").status_code == 404
    assert operator_client.get("/fleet/halls/nope/floor/").status_code == 404
    assert operator_client.get("/fleet/charts/no-such.json").status_code == 404
    operator_client.logout()
    for url in ("/", "/fleet/power/", "/fleet/charts/rack-load.json"):
        assert operator_client.get(url)["Location"].startswith("/accounts/login/")


def test_chart_endpoint_answers_the_pages_figure(operator_client, small_fleet):
    data = json.loads(operator_client.get("/fleet/charts/gpus-by-state.json").content)
    assert data["data"][0]["x"] == [64] and data["data"][0]["y"] == ["Available"]


def test_snapshot_loop_writes_once_per_slot_and_prunes(small_fleet):
    now = timezone.now()
    assert record_snapshot(now=now) == 2  # one (generation, hall) at 5-minute and hourly resolution
    record_snapshot(now=now)
    assert FleetSnapshot.objects.filter(resolution=SnapshotResolution.FIVE_MINUTES).count() == 1
    assert FleetSnapshot.objects.filter(resolution=SnapshotResolution.HOURLY).count() == 1
    point = FleetSnapshot.objects.first()
    assert (point.gpus_total, point.gpus_healthy, point.nodes_by_lifecycle) == (64, 64, {"available": 8})
    later = now + timedelta(days=3)
    record_snapshot(now=later)
    assert FleetSnapshot.objects.filter(resolution=SnapshotResolution.FIVE_MINUTES).count() == 1  # 48 h retention
    assert FleetSnapshot.objects.filter(resolution=SnapshotResolution.HOURLY).count() == 2
    record_snapshot(now=now + timedelta(days=91))
    assert not FleetSnapshot.objects.filter(at__lt=now + timedelta(days=2)).exists()


def test_backfill_gives_charts_plausible_history(small_fleet):
    now = timezone.now()
    written = backfill_history(now=now, days=30)
    hourly = FleetSnapshot.objects.filter(resolution=SnapshotResolution.HOURLY)
    assert 30 * 24 - 2 <= hourly.count() <= 30 * 24 and written > hourly.count()
    shares = [p.gpus_allocated / p.gpus_total for p in hourly]
    assert 0.3 < sum(shares) / len(shares) < 0.9 and max(shares) <= 1


def test_figures_as_data():
    fig = charts.gpus_by_state([("active", 40), ("available", 16), ("repair", 8)])
    bar = fig.data[0]
    assert list(bar.y) == ["Repair", "Available", "Active"] and list(bar.x) == [8, 16, 40]
    assert bar.marker.color[0] == "#a27c1a"
    t0, t1 = timezone.now() - timedelta(hours=1), timezone.now()
    fig = charts.utilisation(
        [
            {"at": t0, "generation": "hopper", "allocated": 50, "total": 100},
            {"at": t0, "generation": "blackwell", "allocated": 0, "total": 100},
            {"at": t1, "generation": "hopper", "allocated": 100, "total": 100},
            {"at": t1, "generation": "blackwell", "allocated": 50, "total": 100},
        ],
        title="t",
    )
    assert [tr.name for tr in fig.data] == ["fleet", "blackwell", "hopper"]
    assert list(fig.data[0].y) == [25.0, 75.0]
    fig = charts.rack_load([5, 88.7, 90, 95, 120])
    assert list(fig.data[0].y) == [1, 0, 0, 0, 0, 0, 0, 0, 1, 2, 1]
    assert "</script>" not in charts.figure_json(charts.utilisation([], title="</script>"))


def test_metrics_needs_an_operator_token(api, ops_api, small_fleet):
    from core.services.tokens import create_api_token
    from tenants.models import Tenant

    assert api.get("/metrics").status_code == 401
    _, tenant_token = create_api_token(
        kind="tenant", tenant=Tenant.objects.create(slug="acme", name="Acme"), role="admin", actor="test"
    )
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {tenant_token}")
    denied = api.get("/metrics")
    assert denied.status_code == 403 and denied["Content-Type"] == "application/problem+json"
    assert ops_api.get("/metrics", HTTP_ACCEPT="text/plain;version=0.0.4").status_code == 200


def test_metrics_parse_and_match_the_database(ops_api, small_fleet):
    _mix_states(8)
    Node.objects.filter(pk=Node.objects.order_by("hostname").first().pk).update(
        gpu_power_w=5000, last_heartbeat_at=timezone.now()
    )
    ops_api.get("/fleet/power/")  # a request for the latency histogram
    families = {f.name: f for f in text_string_to_metric_families(ops_api.get("/metrics").content.decode())}
    gpus = {(s.labels["state"], s.labels["generation"]): s.value for s in families["hangar_gpus"].samples}
    assert sum(gpus.values()) == _sql_gpus() == 64
    assert gpus[("active", "hopper")] == _sql_gpus("n.lifecycle = 'active'")
    assert sum(s.value for s in families["hangar_nodes"].samples) == Node.objects.count()
    hall_kw = {s.labels["hall"]: s.value for s in families["hangar_hall_power_kw"].samples}
    assert hall_kw["dc1/hall-1"] == pytest.approx(7 * 10.2 + 5.0 + 4.6)  # GPU power + host share: an estimate
    sources = {s.labels["hall"]: s.labels["source"] for s in families["hangar_hall_power_kw"].samples}
    assert sources["dc1/hall-1"] == "mixed"
    rack_sources = sorted(s.labels["source"] for s in families["hangar_rack_power_kw"].samples)
    assert rack_sources == ["mixed", "rated", "rated", "rated"]
    ages = {s.labels["hall"]: s.value for s in families["hangar_hall_power_reading_age_seconds"].samples}
    assert 0 <= ages["dc1/hall-1"] < 60
    assert {s.labels["hall"] for s in families["hangar_hall_power_budget_kw"].samples} == {"dc1/hall-1", "dc1/hall-2"}
    assert len(families["hangar_rack_power_kw"].samples) == 4
    assert "hangar_http_request_duration_seconds" in families
    assert "hangar_loop_duration_seconds" in families


def test_loop_metrics_are_kept_for_every_process_and_list_every_loop(ops_api):
    """A pass recorded by another process (a Celery worker) shows on this process's /metrics,
    and a loop that never ran is listed as late instead of missing."""
    from prometheus_client.parser import text_string_to_metric_families

    from core.loop_metrics import task_finished, task_started
    from core.metrics import observe_loop
    from core.models import LoopRun

    observe_loop("record_fleet_snapshot", 0.2)

    class Task:
        name = "health.tasks.health_sweep"

    task_started(task_id="t1", task=Task())
    task_finished(task_id="t1", task=Task(), state="SUCCESS")
    assert LoopRun.objects.get(name="health_sweep").runs == 1  # in the database, not this process's memory
    body = ops_api.get("/metrics", HTTP_ACCEPT="text/plain;version=0.0.4").content.decode()
    families = {f.name: f for f in text_string_to_metric_families(body)}
    last = {s.labels["loop"]: s.value for s in families["hangar_loop_last_run_timestamp_seconds"].samples}
    assert last["record_fleet_snapshot"] > 0 and last["health_sweep"] > 0 and last["allocation_loop"] == 0
    lag = {s.labels["loop"]: s.value for s in families["hangar_loop_lag_seconds"].samples}
    assert lag["health_sweep"] == 0 and lag["allocation_loop"] > 0  # no scheduler ever started: overdue
    late = {s.labels["loop"]: s.value for s in families["hangar_loop_late"].samples}
    assert late["allocation_loop"] == 1 and late["health_sweep"] == 0
    counts = {
        s.labels["loop"]: s.value for s in families["hangar_loop_duration_seconds"].samples if s.name.endswith("_count")
    }
    assert counts["health_sweep"] == 1


def test_backfilled_history_ends_at_the_live_value(small_fleet):
    from .lifecycle_helpers import place

    for node in Node.objects.order_by("hostname")[:3]:
        place(node, "active")
    now = timezone.now()
    backfill_history(now=now, days=2)
    last = FleetSnapshot.objects.filter(resolution=SnapshotResolution.FIVE_MINUTES).order_by("-at").first()
    assert last.gpus_allocated == 3 * 8  # the live allocation, not the invented month's share
    older = FleetSnapshot.objects.filter(resolution=SnapshotResolution.HOURLY, at__lt=now - timedelta(days=1))
    assert any(s.gpus_allocated != 24 for s in older)  # the month before keeps its invented shape


def test_figures_look_like_plotly_white_without_carrying_all_of_it():
    """The console's charts keep plotly_white's layout and its bar and line styling; the
    defaults for trace kinds they never draw stay out of every page's figure JSON."""
    import plotly.io as pio

    white = pio.templates["plotly_white"]
    fig = charts.gpus_by_state([("active", 40)])
    template = fig.layout.template
    assert template.layout == white.layout
    assert template.data.bar == white.data.bar and template.data.scatter == white.data.scatter
    assert not template.data.heatmap and not template.data.pie
    assert len(charts.figure_json(fig)) < len(fig.update_layout(template="plotly_white").to_json()) / 2
