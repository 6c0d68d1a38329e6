"""Scale fixtures shared by the benchmarks."""

from fleet.models import Node

SCALE_GPUS = 100_000  # 12,500 nodes


def build(name: str) -> None:
    if name == "scale":
        if not Node.objects.exists():
            from devtools.services.fleet_seed import seed_fleet

            seed_fleet(gpus=SCALE_GPUS, site_slug="scale")
        return
    raise KeyError(f"unknown fixture {name!r}")
