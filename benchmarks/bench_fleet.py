"""Fleet benchmarks: seeding the 100,000-GPU fixture, and the admin node changelist at 12,500 nodes."""

import time
import uuid

from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.test import Client

from benchmarks.harness import Measurement, benchmark, count_queries, timed
from devtools.services.fleet_seed import seed_fleet
from fleet.models import GPU, Node


@benchmark("seed_fleet --gpus 100000", fixture="empty", target="< 60 s")
def seed_100k() -> Measurement:
    started = time.perf_counter()
    seed_fleet(gpus=100_000, site_slug="scale")
    ours = time.perf_counter() - started
    # Baseline: the same number of GPU and node rows inserted by raw executemany in one transaction.
    gpu_rows = GPU.objects.count()
    node_rows = Node.objects.count()
    table = GPU._meta.db_table
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"CREATE TEMPORARY TABLE bench_rows AS SELECT * FROM {table} WHERE 1=0")
        rows = [
            (uuid.uuid4().hex, i % 8, f"GPU-bench-{i}", "", str(uuid.uuid4())) for i in range(gpu_rows + node_rows * 11)
        ]
        started = time.perf_counter()
        cursor.executemany(
            'INSERT INTO bench_rows (id, "index", uuid, serial, node_id) VALUES (%s, %s, %s, %s, %s)', rows
        )
        baseline = time.perf_counter() - started
        cursor.execute("DROP TABLE bench_rows")
    return Measurement(
        ours, baseline, note=f"{node_rows} nodes, {gpu_rows} GPUs; baseline = raw executemany of as many rows"
    )


@benchmark("admin node changelist (12,500 nodes)", target="queries fixed")
def admin_changelist() -> Measurement:
    user, _ = get_user_model().objects.get_or_create(
        username="bench", defaults={"is_staff": True, "is_superuser": True}
    )
    client = Client()
    client.force_login(user)
    url = "/admin/fleet/node/"
    client.get(url)
    queries = count_queries(lambda: client.get(url))
    ours = timed(lambda: client.get(url), repeat=5)
    with connection.cursor() as cursor:
        sql = (
            "SELECT n.*, r.*, t.* FROM fleet_node n JOIN fleet_rack r ON r.id = n.rack_id "
            "JOIN fleet_nodetype t ON t.id = n.node_type_id ORDER BY n.hostname LIMIT 100"
        )
        baseline = timed(lambda: (cursor.execute(sql), cursor.fetchall()), repeat=5)
    return Measurement(ours, baseline, queries, note="page of 100; baseline = the page's joined SELECT")
