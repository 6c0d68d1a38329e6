"""Dashboard pages at 12,500 nodes (the overview at 125,000 too): server time and queries for Overview, Power, a floor map
(a 512-rack hall) and a rack elevation. Baselines are the raw grouped SQL each page rests on."""

from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client
from django.utils import timezone

from benchmarks.fixtures import LARGE
from benchmarks.harness import Measurement, benchmark, count_queries, timed
from fleet.models import FleetSnapshot, Hall, Rack

NODE_GPU_SQL = (
    "SELECT t.generation, h.name, n.lifecycle, SUM(t.gpus_per_node), "
    "SUM(CASE WHEN n.health = 'healthy' THEN t.gpus_per_node ELSE 0 END) "
    "FROM fleet_node n JOIN fleet_nodetype t ON t.id = n.node_type_id JOIN fleet_rack r ON r.id = n.rack_id "
    "JOIN fleet_hall h ON h.id = r.hall_id GROUP BY t.generation, h.name, n.lifecycle"
)
RACK_SQL = (
    'SELECT r.id, r.name, r.row, r."column", COUNT(n.id), SUM(t.node_kw) FROM fleet_rack r '
    "LEFT JOIN fleet_node n ON n.rack_id = r.id LEFT JOIN fleet_nodetype t ON t.id = n.node_type_id "
    'WHERE r.hall_id = %s GROUP BY r.id, r.name, r.row, r."column"'
)


def _client() -> Client:
    user, _ = get_user_model().objects.get_or_create(username="bench-dash", defaults={"is_staff": True})
    client = Client()
    client.force_login(user)
    if not FleetSnapshot.objects.exists():
        from fleet.services.snapshots import backfill_history

        backfill_history(now=timezone.now(), days=30)
    return client


def _page(url: str, baseline_sql: str, params=()) -> Measurement:
    client = _client()
    assert client.get(url).status_code == 200, url
    queries = count_queries(lambda: client.get(url))
    ours = timed(lambda: client.get(url), repeat=5)
    with connection.cursor() as cursor:
        baseline = timed(lambda: (cursor.execute(baseline_sql, params), cursor.fetchall()), repeat=5)
    return Measurement(ours, baseline, queries, note=f"GET {url.split('?')[0][:40]}")


@benchmark("dashboard overview page (12,500 nodes)", target="<= 300 ms, <= 20 queries")
def overview_page() -> Measurement:
    return _page("/", NODE_GPU_SQL)


@benchmark("dashboard overview page (125,000 nodes)", fixture=LARGE, target="<= 500 ms, the same queries")
def overview_page_125k() -> Measurement:
    return _page("/", NODE_GPU_SQL)


@benchmark("dashboard power page (12,500 nodes)", target="queries fixed")
def power_page() -> Measurement:
    return _page("/fleet/power/", RACK_SQL.replace("WHERE r.hall_id = %s ", ""))


@benchmark("dashboard floor map (512-rack hall)", target="queries fixed")
def floor_map_page() -> Measurement:
    hall = Hall.objects.get(name="hall-1", site__slug="scale")
    return _page(
        f"/fleet/halls/{hall.pk}/floor/",
        RACK_SQL,
        [str(hall.pk).replace("-", "") if connection.vendor == "sqlite" else hall.pk],
    )


@benchmark("dashboard rack elevation", target="queries fixed")
def rack_elevation_page() -> Measurement:
    rack = Rack.objects.filter(nodes__isnull=False).order_by("name").first()
    sql = "SELECT n.*, t.* FROM fleet_node n JOIN fleet_nodetype t ON t.id = n.node_type_id WHERE n.rack_id = %s"
    return _page(
        f"/fleet/racks/{rack.pk}/", sql, [str(rack.pk).replace("-", "") if connection.vendor == "sqlite" else rack.pk]
    )
