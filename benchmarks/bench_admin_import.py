"""Admin inventory import at scale: 1,000 nodes with 8,000 GPUs and 2,000 drives in one XLSX
workbook, previewed and confirmed through the admin's own pages, next to a 12,500-node fleet
(so every uniqueness and placement lookup runs against a full table)."""

import io
import re
import time
import tracemalloc
import uuid
from decimal import Decimal

from django.contrib.auth import get_user_model
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import transaction
from django.test import Client
from django.urls import reverse
from openpyxl import Workbook

from benchmarks.harness import Measurement, benchmark, timed
from fleet.inventory_files import read_workbook
from fleet.models import GPU, Drive, Hall, Node, Rack, Site
from fleet.services.inventory_import import apply_import

NODES = 1_000
NODES_PER_RACK = 4  # B200 8-GPU, 10U and 14.3 kW each: 4 to a 42U, 140 kW liquid rack
NODE_HEADER = [
    "hostname",
    "serial",
    "rack",
    "u_position",
    "node_type",
    "fabric_domain",
    "leaf_switch",
    "bmc_address",
    "bmc_mac",
    "commissioned_on",
]


class _Rollback(Exception):
    pass


def _racks() -> list[Rack]:
    site = Site.objects.order_by("name").first()
    hall = Hall.objects.create(site=site, name="bench-import", it_power_budget_kw=Decimal(50000))
    racks = [
        Rack(
            hall=hall,
            name=f"bi-r{i:04d}",
            row=i // 16,
            column=i % 16,
            rated_power_kw=Decimal(140),
            cooling="liquid",
            cooling_capacity_kw=Decimal(140),
        )
        for i in range(NODES // NODES_PER_RACK)
    ]
    return Rack.objects.bulk_create(racks)


def _workbook(racks: list[Rack]) -> bytes:
    book = Workbook(write_only=True)
    nodes, gpus, drives = book.create_sheet("nodes"), book.create_sheet("gpus"), book.create_sheet("drives")
    nodes.append(NODE_HEADER)
    gpus.append(["node", "index", "uuid", "serial"])
    drives.append(["node", "serial", "model", "capacity_gb", "interface"])
    for i in range(NODES):
        rack = racks[i // NODES_PER_RACK]
        host = f"bi-gpu{i:05d}"
        nodes.append(
            [
                host,
                f"BI-SN{i:05d}",
                rack.name,
                1 + (i % NODES_PER_RACK) * 10,
                "b200-sxm-8x",
                "",
                "",
                f"10.200.{i // 256}.{i % 256}",
                f"3c:ec:ef:{i >> 16:02x}:{(i >> 8) & 255:02x}:{i & 255:02x}",
                "2026-11-30",
            ]
        )
        for g in range(8):
            gpus.append([host, g, f"GPU-{uuid.uuid4()}", f"BI-G{i:05d}-{g}"])
        for d in range(2):
            drives.append([host, f"BI-D{i:05d}-{d}", "Samsung PM1743", 7680, "nvme"])
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


@benchmark(
    "admin import: 1,000 nodes + 8,000 GPUs + 2,000 drives (XLSX), preview + confirm",
    target="≤ 30 s total, bounded memory",
)
def import_thousand_nodes() -> Measurement:
    data = _workbook(_racks())
    user = get_user_model().objects.create_user("bench-importer", password="x" * 16, is_staff=True, is_superuser=True)
    client = Client()
    client.force_login(user)
    url = reverse("admin:fleet_node_import")

    def upload():
        return SimpleUploadedFile("rack-row.xlsx", data)

    started = time.perf_counter()
    preview = client.post(url, {"file": upload()})
    preview_s = time.perf_counter() - started
    assert preview.status_code == 200, preview.content[:2000]
    staged = re.search(rb'name="staged" value="([^"]+)"', preview.content).group(1).decode()

    # memory, measured apart so tracemalloc's overhead stays out of the times
    tracemalloc.start()
    client.post(url, {"file": upload()})
    _, preview_peak = tracemalloc.get_traced_memory()
    tracemalloc.reset_peak()
    try:
        with transaction.atomic():
            apply_import(read_workbook("x.xlsx", data, csv_sheet="nodes", max_rows=100_000), actor="bench")
            _, confirm_peak = tracemalloc.get_traced_memory()
            raise _Rollback
    except _Rollback:
        pass
    tracemalloc.stop()

    started = time.perf_counter()
    confirm = client.post(url, {"confirm": "1", "staged": staged})
    confirm_s = time.perf_counter() - started
    assert confirm.status_code == 302
    assert Node.objects.filter(hostname__startswith="bi-gpu").count() == NODES
    assert GPU.objects.filter(node__hostname__startswith="bi-gpu").count() == NODES * 8
    assert Drive.objects.filter(node__hostname__startswith="bi-gpu").count() == NODES * 2
    read_s = timed(lambda: read_workbook("x.xlsx", data, csv_sheet="nodes", max_rows=100_000))
    return Measurement(
        preview_s + confirm_s,
        read_s,
        note=(
            f"{len(data) / 1e6:.2f} MB file; preview {preview_s:.2f} s (Python heap peak {preview_peak / 2**20:.0f} MiB), "
            f"confirm {confirm_s:.2f} s (heap peak of the apply {confirm_peak / 2**20:.0f} MiB); "
            "baseline = openpyxl reading the workbook alone"
        ),
    )
