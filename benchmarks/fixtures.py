"""Scale fixtures shared by the benchmarks."""

from benchmarks import bench_admin, bench_ledger
from fleet.models import Node

SCALE_GPUS = 100_000  # 12,500 nodes
SCALE_125K_GPUS = 1_000_000  # 125,000 nodes
LARGE = "scale125k"  # its rows run on their own (benchmarks/__main__.py)
LEDGER_50M = "ledger50m"  # 50,000,000 usage rows: on their own too
AUDIT_1M = "audit1m"  # the scale fleet with 1,000,000 audit rows and BMC records: on its own (it adds to "scale")
ALONE = {
    LARGE: "125,000 nodes",
    LEDGER_50M: "ledger at 50M",
    AUDIT_1M: "1,000,000 audit rows",
}  # fixture → the --only text that selects its rows


def build(name: str) -> None:
    if name == "scale":
        if not Node.objects.exists():
            from devtools.services.fleet_seed import seed_fleet

            seed_fleet(gpus=SCALE_GPUS, site_slug="scale")
        return
    if name == LARGE:
        count = Node.objects.count()
        if count and count < SCALE_125K_GPUS // 8:
            raise RuntimeError("the 125,000-node rows need their own run: python -m benchmarks --only '125,000 nodes'")
        if not count:
            from devtools.services.fleet_seed import seed_fleet

            seed_fleet(gpus=SCALE_125K_GPUS, site_slug="scale")
        return
    if name == LEDGER_50M:
        bench_ledger.load()
        return
    if name == AUDIT_1M:
        build("scale")
        bench_admin.load()
        return
    raise KeyError(f"unknown fixture {name!r}")
