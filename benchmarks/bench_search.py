"""The console search and the admin at scale (docs/search.md, docs/admin.md).

Search: p50/p99 of core.search.search() per identifier kind — exact lookups of identifiers
drawn from the index, and 6-character prefixes of them — next to the raw-SQL range scan of the
index for the same values. Admin: the node changelist, change form and search (a GPU UUID),
with their query counts, next to the raw SELECT of the same page."""

import random
import statistics
import time

from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client

from benchmarks.harness import Measurement, benchmark, count_queries, timed
from core.models import SearchEntry
from core.search import search
from core.search.selectors import TOP, normalise
from fleet.models import GPU, Node

SAMPLES = 200  # lookups per kind (half exact, half prefix)
FIXTURES = {"scale": "12,500 nodes", "scale125k": "125,000 nodes"}
# kinds the scale fixtures carry (the seed makes no tenants, allocations, incidents or invoices)
FLEET_KINDS = [
    "hostname",
    "node_serial",
    "asset_tag",
    "bmc_address",
    "bmc_mac",
    "gpu_uuid",
    "gpu_serial",
    "drive_serial",
    "rack_name",
    "hall_name",
]
RAW_SQL = (
    "SELECT value, kind, object_id FROM core_searchentry WHERE value >= %s AND value < %s "
    "ORDER BY value, kind, object_id LIMIT 51"
)


def _percentile(samples: list[float], share: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(round(share * (len(ordered) - 1))))]


def _queries_for(kind: str) -> list[str]:
    rng = random.Random(kind)
    ids = list(SearchEntry.objects.filter(kind=kind).values_list("value", flat=True)[:20_000])
    picked = rng.sample(ids, min(len(ids), SAMPLES // 2))
    return picked + [v[:6] for v in picked]  # exact, then prefixes


def _search_row(kind: str, fixture: str) -> Measurement:
    queries = _queries_for(kind)
    if not queries:
        return Measurement(0.0, note="no identifiers of this kind in the fixture")
    search(queries[0])  # warm: connection, caches
    ours, raw = [], []
    for q in queries:
        started = time.perf_counter()
        search(q)
        ours.append(time.perf_counter() - started)
    with connection.cursor() as cursor:
        for q in queries:
            value = normalise(q)
            started = time.perf_counter()
            cursor.execute(RAW_SQL, [value, value + TOP])
            cursor.fetchall()
            raw.append(time.perf_counter() - started)
    count = count_queries(lambda: search(queries[-1]))
    return Measurement(
        _percentile(ours, 0.99),
        _percentile(raw, 0.99),
        count,
        note=(
            f"p99 shown; p50 {statistics.median(ours) * 1000:.1f} ms (raw {statistics.median(raw) * 1000:.1f} ms); "
            f"{len(queries)} lookups, half exact, half 6-char prefix; {FIXTURES[fixture]}"
        ),
    )


for _fixture, _size in FIXTURES.items():
    for _kind in FLEET_KINDS:
        benchmark(f"search {_kind} ({_size})", fixture=_fixture, target="p99 <= 50 ms")(
            lambda kind=_kind, fixture=_fixture: _search_row(kind, fixture)
        )


def _admin_client() -> Client:
    user, _ = get_user_model().objects.get_or_create(
        username="bench", defaults={"is_staff": True, "is_superuser": True}
    )
    client = Client()
    client.force_login(user)
    return client


def admin_row(url: str, baseline_sql: str, params, note: str, client: Client | None = None) -> Measurement:
    """One admin page: the median of 5 requests (a superuser's unless `client` says whose), its
    query count, and the raw SQL of the page's main SELECT."""
    client = client or _admin_client()
    response = client.get(url)
    assert response.status_code == 200, (url, response.status_code)
    queries = count_queries(lambda: client.get(url))
    ours = timed(lambda: client.get(url), repeat=5)
    with connection.cursor() as cursor:
        baseline = timed(lambda: (cursor.execute(baseline_sql, params), cursor.fetchall()), repeat=5)
    return Measurement(ours, baseline, queries, note=note)


def _admin_rows(fixture: str, size: str) -> None:
    @benchmark(f"admin node changelist ({size})", fixture=fixture, target="<= 300 ms, queries fixed")
    def changelist() -> Measurement:
        return admin_row(
            "/admin/fleet/node/",
            "SELECT n.*, r.*, t.* FROM fleet_node n JOIN fleet_rack r ON r.id = n.rack_id "
            "JOIN fleet_nodetype t ON t.id = n.node_type_id ORDER BY n.hostname LIMIT 100",
            [],
            f"page of 100, count capped at 10,001; baseline = the page's joined SELECT; {size}",
        )

    @benchmark(f"admin node change form ({size})", fixture=fixture, target="<= 300 ms, queries fixed")
    def change_form() -> Measurement:
        node = Node.objects.order_by("-hostname").first()
        return admin_row(
            f"/admin/fleet/node/{node.pk}/change/",
            "SELECT * FROM fleet_node n JOIN fleet_gpu g ON g.node_id = n.id WHERE n.id = %s",
            [node.pk],
            f"8 GPUs, 10 drives, latest 20 events inline; baseline = the node with its GPUs; {size}",
        )

    @benchmark(f"admin node search by GPU UUID ({size})", fixture=fixture, target="<= 300 ms, queries fixed")
    def search_gpu() -> Measurement:
        gpu = GPU.objects.order_by("-uuid").values_list("uuid", flat=True).first()
        return admin_row(
            f"/admin/fleet/node/?q={gpu}",
            "SELECT n.* FROM fleet_node n WHERE n.id IN (SELECT node_id FROM fleet_gpu WHERE uuid = %s)",
            [gpu],
            f"through the search index; baseline = a join on the GPU's own unique index; {size}",
        )


for _fixture, _size in FIXTURES.items():
    _admin_rows(_fixture, _size)
