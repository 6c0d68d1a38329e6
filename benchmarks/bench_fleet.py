"""Fleet benchmarks: seeding the 100,000-GPU fixture (the admin node pages are in bench_search.py)."""

import time
import uuid

from django.db import connection, transaction

from benchmarks.harness import Measurement, benchmark
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
