"""Out-of-band power sync: one pass of the power sync loop over as many emulated BMCs as one
sushy-emulator process serves here (BMC_BENCH_SYSTEMS, default 2,048 systems of the 12,500-node
fixture), at the loop's concurrency, against a baseline of the same Redfish GETs made with
plain requests and no database. The projection to 12,500 nodes is linear at the same
concurrency: a real fleet's BMCs answer in parallel, so on real hardware it is an upper bound."""

import os
import time
from concurrent.futures import ThreadPoolExecutor

import requests
from django.conf import settings

from benchmarks.harness import Measurement, benchmark, count_queries
from devtools.redfish_emulator import RedfishEmulator, system_uuid
from fleet.models import Node, NodeBMC
from fleet.services.bmc_credentials import encrypt
from fleet.services.power_sync import power_sync_pass

SYSTEMS = int(os.environ.get("BMC_BENCH_SYSTEMS", "512"))
# One emulator process per 64 systems, as a rack's worth of separate BMCs: the emulator's cost
# per system read grows with the systems it serves (its fake manager and chassis drivers walk
# them all), so one process with thousands of systems measures the emulator, not Hangar.
PER_EMULATOR = 64
FLEET = 12_500


@benchmark(f"bmc: power sync pass over {SYSTEMS:,} emulated BMCs (projected to 12,500)", target="12,500 in ≤ 60 s")
def power_sync() -> Measurement:
    hostnames = list(Node.objects.order_by("hostname").values_list("hostname", flat=True)[:SYSTEMS])
    groups = [hostnames[i : i + PER_EMULATOR] for i in range(0, len(hostnames), PER_EMULATOR)]
    emulators = [RedfishEmulator(systems=group).start(timeout_s=300) for group in groups]
    url_of = {h: e.url for e, group in zip(emulators, groups, strict=True) for h in group}
    emulator = emulators[0]
    try:
        user, password = encrypt(emulator.username), encrypt(emulator.password)
        NodeBMC.objects.all().delete()
        NodeBMC.objects.bulk_create(
            [
                NodeBMC(
                    node_id=node_id,
                    redfish_url=url_of[hostname],
                    system_path=f"/redfish/v1/Systems/{system_uuid(hostname)}",
                    username_encrypted=user,
                    password_encrypted=password,
                )
                for node_id, hostname in Node.objects.filter(hostname__in=hostnames).values_list("id", "hostname")
            ],
            batch_size=2000,
        )
        concurrency = settings.BMC_SYNC_CONCURRENCY
        started = time.perf_counter()
        summary = power_sync_pass(budget_s=3600, concurrency=concurrency)
        ours_s = time.perf_counter() - started
        assert summary["read"] == len(hostnames), summary
        NodeBMC.objects.update(last_checked_at=None)
        queries = count_queries(lambda: power_sync_pass(budget_s=3600, concurrency=concurrency))

        session = requests.Session()
        session.auth = (emulator.username, emulator.password)
        session.mount("http://", requests.adapters.HTTPAdapter(pool_maxsize=concurrency))
        paths = [f"{url_of[h]}/redfish/v1/Systems/{system_uuid(h)}" for h in hostnames]
        started = time.perf_counter()
        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            list(pool.map(lambda url: session.get(url, timeout=30).json()["PowerState"], paths))
        baseline_s = time.perf_counter() - started
    finally:
        for each in emulators:
            each.stop()
    projected = ours_s * FLEET / len(hostnames)
    return Measurement(
        ours_s=ours_s,
        baseline_s=baseline_s,
        queries=queries,
        note=(
            f"{len(hostnames)} systems on {len(emulators)} emulator processes, concurrency {concurrency}; projected "
            "12,500 nodes: "
            f"{projected:.0f} s at this rate (each read is one Redfish GET of the system)"
        ),
    )
