"""The fleet twin (docs/twin.md): a simulated year of the demo fleet (256 nodes, 2,048 GPUs,
64-node jobs) with 4 % and 2 % spares, each failure replayed through the real health ingest and
sweep in the twin's own database; and a year of 12,500 nodes through the event loop alone."""

import io
import time

from django.core.management import call_command

from benchmarks.harness import Measurement, benchmark


def _twin(*argv: str) -> tuple[float, str]:
    out = io.StringIO()
    started = time.perf_counter()
    call_command("twin", *argv, stdout=out)
    return time.perf_counter() - started, out.getvalue()


@benchmark(
    "twin: a year of the demo fleet (256 nodes), 4 % vs 2 % spares, replayed",
    fixture="empty",
    target="≤ 10 min",
)
def bench_twin_demo_year() -> Measurement:
    seconds, out = _twin("--nodes", "256", "--days", "365", "--variant", "2% spares:spare_fraction=0.02")
    failures = out.count(" failures, ")
    return Measurement(
        ours_s=seconds, note=f"migrate + seed + {failures} variants, every failure through ingest + sweep"
    )


@benchmark("twin: a year of 12,500 nodes, event loop (modelled detection)", fixture="empty", target="≤ 60 s")
def bench_twin_large_year() -> Measurement:
    seconds, _ = _twin("--nodes", "12500", "--days", "365", "--detection", "modelled")
    return Measurement(ours_s=seconds, note="~17,000 failures; no database")
