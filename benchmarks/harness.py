"""The benchmark registry and table.

A benchmark is a function registered with `@benchmark(name, fixture=...)` that returns a
`Measurement`: our time, the raw-SQL baseline for the same work, and the queries we issued.
Fixtures ("empty", "scale": 100,000 GPUs / 12,500 nodes) are built once per run in a
dedicated benchmark database, never the demo's.
"""

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from django.db import connection
from django.test.utils import CaptureQueriesContext


@dataclass
class Measurement:
    ours_s: float
    baseline_s: float | None = None
    queries: int | None = None
    note: str = ""


@dataclass(frozen=True)
class Benchmark:
    name: str
    fixture: str
    run: Callable[[], Measurement]
    target: str = ""


REGISTRY: list[Benchmark] = []


def benchmark(name: str, *, fixture: str = "scale", target: str = ""):
    def register(fn: Callable[[], Measurement]):
        REGISTRY.append(Benchmark(name=name, fixture=fixture, run=fn, target=target))
        return fn

    return register


def timed(fn: Callable, *, repeat: int = 1) -> float:
    """Median wall time of `repeat` calls, in seconds."""
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def count_queries(fn: Callable) -> int:
    with CaptureQueriesContext(connection) as ctx:
        fn()
    return len(ctx.captured_queries)


@dataclass
class Table:
    rows: list[tuple] = field(default_factory=list)

    def add(self, bench: Benchmark, m: Measurement):
        ratio = f"{m.ours_s / m.baseline_s:.2f}x" if m.baseline_s else "-"
        self.rows.append(
            (
                bench.name,
                f"{m.ours_s * 1000:.1f} ms",
                f"{m.baseline_s * 1000:.1f} ms" if m.baseline_s else "-",
                ratio,
                "-" if m.queries is None else str(m.queries),
                bench.target,
                m.note,
            )
        )

    def render(self) -> str:
        header = ("benchmark", "ours", "raw SQL", "ratio", "queries", "target", "note")
        widths = [max(len(str(r[i])) for r in [header, *self.rows]) for i in range(len(header))]
        line = lambda r: "  ".join(str(c).ljust(w) for c, w in zip(r, widths))  # noqa: E731
        return "\n".join([line(header), line(tuple("-" * w for w in widths)), *map(line, self.rows)])
