"""The fleet twin's event loop: a simulated year of failures, priced in goodput, credits and spares.

Discrete-event: a heap of (time, event); the loop jumps from one event to the next, never sleeps.
What comes from where (docs/twin.md has the full table):

- Failures: each node draws its gaps and causes from the agent's own `FaultProcess` on the
  reference rate and Llama 3 cause mix (core/reference/reliability.csv), one seeded stream per
  node, so every variant of a run meets the same failures (common random numbers).
- Detection: every failure is handed to a `detector` (devtools.twin_replay in the twin
  database: the simulated node's hardware turns the cause into signals, the real health ingest
  and the real health sweep decide, on the simulated clock, whether the node is pulled). The
  `modelled_detector` here stands in when no database is at hand (unit tests, the benchmark of
  the event loop alone) and says so in the report.
- Workload, checkpoints, repairs, spares, burn-in and SLA credits: modelled here from
  core/reference/twin.csv (each default sourced or marked assumed there).
"""

from __future__ import annotations

import csv
import heapq
import io
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields, replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

from hangar_agent.hardware.faults import FaultProcess
from hangar_agent.hardware.reference import load_reliability

TWIN_CSV = Path(__file__).resolve().parent.parent / "core" / "reference" / "twin.csv"
HOUR = 3600.0
DAY = 86400.0
MAX_NODES = 20_000  # 12,500-node fleets are a stated goal; every number a client sends is bounded
MAX_DAYS = 3 * 365
MAX_VARIANTS = 8


def load_twin_reference(path: Path = TWIN_CSV) -> dict[str, str]:
    with open(path, newline="") as fh:
        return {row["parameter"]: row["value"] for row in csv.DictReader(fh)}


@dataclass(frozen=True)
class JobClass:
    name: str
    share: float  # share of the non-spare nodes this class fills
    nodes: int  # nodes per job


def parse_job_mix(text: str) -> tuple[JobClass, ...]:
    """'large:0.7:64,small:0.3:4' → job classes; ValueError on anything else."""
    classes = []
    for item in text.split(","):
        name, share, nodes = item.strip().split(":")
        job = JobClass(name.strip(), float(share), int(nodes))
        if not (0 <= job.share <= 1 and 1 <= job.nodes <= MAX_NODES and job.name):
            raise ValueError(f"job class {item!r}: share 0..1, nodes 1..{MAX_NODES}")
        classes.append(job)
    if not classes or abs(sum(c.share for c in classes) - 1) > 1e-6:
        raise ValueError("the job mix's shares must add up to 1")
    return tuple(classes)


@dataclass(frozen=True)
class TwinSpec:
    """One run's parameters; a variant is the same spec with some of them replaced."""

    nodes: int
    days: float = 365.0
    gpus_per_node: int = 8
    sku: str = "h100-sxm-8x"
    generation: str = "hopper"
    seed: int = 1
    spare_fraction: float = 0.04
    burn_in_days: float = 1.0
    checkpoint_minutes: float = 30.0
    restart_minutes: float = 10.0
    swap_minutes: float = 20.0
    job_mix: str = "large:1.0:64"
    repair_hours_in_place: float = 2.0
    repair_hours_part_swap: float = 72.0
    technician_hours_in_place: float = 0.25
    technician_hours_part_swap: float = 4.0
    infant_failure_share: float = 0.05
    infant_window_days: float = 7.0
    in_place_causes: str = "software,host_maintenance"
    no_fault_causes: str = "software"  # the node itself is sound: pulling it is a false pull
    price_per_gpu_hour: Decimal = Decimal("2.00")
    sla_credit_rate: Decimal = Decimal("1")
    sla_cap_percent: Decimal = Decimal("10")
    start: datetime = datetime(2027, 1, 1, tzinfo=UTC)

    @classmethod
    def from_reference(cls, **given) -> TwinSpec:
        ref = load_twin_reference()
        defaults = dict(
            spare_fraction=float(ref["spare_fraction"]),
            burn_in_days=float(ref["burn_in_days"]),
            checkpoint_minutes=float(ref["checkpoint_interval"]),
            restart_minutes=float(ref["restart_overhead"]),
            swap_minutes=float(ref["replacement_swap"]),
            job_mix=ref["job_mix"],
            repair_hours_in_place=float(ref["repair_hours_in_place"]),
            repair_hours_part_swap=float(ref["repair_hours_part_swap"]),
            technician_hours_in_place=float(ref["technician_hours_in_place"]),
            technician_hours_part_swap=float(ref["technician_hours_part_swap"]),
            infant_failure_share=float(ref["infant_failure_share"]),
            infant_window_days=float(ref["infant_window"]),
            in_place_causes=ref["repair_in_place"],
        )
        defaults.update(default_terms(given.get("sku", cls.sku)))
        return cls(**{**defaults, **given}).checked()

    def checked(self) -> TwinSpec:
        bounds = {
            "nodes": (1, MAX_NODES),
            "days": (0.01, MAX_DAYS),
            "gpus_per_node": (1, 72),
            "spare_fraction": (0, 0.5),
            "burn_in_days": (0, 30),
            "checkpoint_minutes": (1, 7 * 24 * 60),
            "restart_minutes": (0, 24 * 60),
            "swap_minutes": (0, 24 * 60),
            "repair_hours_in_place": (0, 24 * 30),
            "repair_hours_part_swap": (0, 24 * 90),
            "infant_failure_share": (0, 1),
            "infant_window_days": (0.01, 90),
        }
        for name, (low, high) in bounds.items():
            value = getattr(self, name)
            if not low <= value <= high:
                raise ValueError(f"{name} must be within {low}..{high}, got {value}")
        parse_job_mix(self.job_mix)
        return self

    def with_changes(self, text: str) -> TwinSpec:
        """'spare_fraction=0.02,burn_in_days=3' → a variant of this spec; ValueError on unknown keys."""
        types = {f.name: f.type for f in fields(self)}
        changes = {}
        for item in filter(None, (p.strip() for p in text.split(","))):
            key, sep, value = item.partition("=")
            key = key.strip()
            if not sep or key not in types or key in ("nodes", "seed", "start", "days", "gpus_per_node", "sku"):
                raise ValueError(f"{item!r}: a variant changes one of the policy or workload parameters by KEY=VALUE")
            current = getattr(self, key)
            changes[key] = type(current)(value.strip()) if not isinstance(current, str) else value.strip()
        return replace(self, **changes).checked()


def default_terms(sku: str) -> dict:
    """What the ledger starts with when nobody changed it: the default price book's price of
    `sku` (economics.csv, billing.pricebook) and the standard SLA policy the billing migrations
    install (BILLING_SLA_CREDIT_FACTOR, capped at the month's charge)."""
    from django.conf import settings

    from billing.pricebook import default_price_rows

    prices = {row["sku"]: row["unit_price"] for row in default_price_rows()}
    terms = {"sla_credit_rate": Decimal(str(settings.BILLING_SLA_CREDIT_FACTOR)), "sla_cap_percent": Decimal("100")}
    if sku in prices:
        terms["price_per_gpu_hour"] = prices[sku]
    return terms


@dataclass
class _Job:
    index: int
    name: str
    nodes: list[int]
    since: float = 0.0  # when it last (re)started: checkpoints count from here
    down_until: float | None = None  # restarting or waiting for a node
    waiting: int = 0  # nodes it still needs


@dataclass
class VariantResult:
    name: str
    changes: str
    spec: dict
    interruptions: int = 0
    failures: int = 0
    by_cause: dict[str, int] = field(default_factory=dict)  # every failure, by cause
    interruptions_by_cause: dict[str, int] = field(default_factory=dict)  # failures that stopped a job
    allocated_gpu_hours: float = 0.0
    lost_gpu_hours: float = 0.0
    goodput: float = 1.0
    goodput_by_month: list[float] = field(default_factory=list)
    sla_credits: Decimal = Decimal("0")
    credits_by_month: list[str] = field(default_factory=list)
    spares_reserved: int = 0
    spares_used_peak: int = 0
    spares_used_by_month: list[int] = field(default_factory=list)
    replacement_wait_hours: float = 0.0  # all jobs' time stopped waiting for a node
    longest_wait_hours: float = 0.0  # the longest one job waited for its node(s)
    spares_needed: int | None = None  # fewest spares keeping every wait within the target (if asked)
    wait_target_hours: float | None = None
    technician_hours: float = 0.0
    rmas: int = 0
    false_pulls: int = 0
    missed: int = 0
    false_pulls_by_cause: dict[str, int] = field(default_factory=dict)
    missed_by_cause: dict[str, int] = field(default_factory=dict)
    caught_in_burn_in: int = 0
    detection: str = "modelled"
    wall_seconds: float = 0.0

    def as_dict(self) -> dict:
        data = asdict(self)
        data["sla_credits"] = str(self.sla_credits)
        return data


Detector = Callable[[int, str, datetime], tuple[bool, str]]


def modelled_detector(in_place: set[str]) -> Detector:
    """No database: a node is pulled for repair unless its cause is fixed in place (modelled)."""

    def detect(node: int, cause: str, at: datetime) -> tuple[bool, str]:
        return cause not in in_place, "modelled"

    return detect


def months_of(spec: TwinSpec) -> int:
    return max(1, int(-(-spec.days // 30.4375)))


def run_variant(
    spec: TwinSpec,
    *,
    name: str = "baseline",
    changes: str = "",
    detector: Detector | None = None,
    detection: str = "modelled",
    progress: Callable[[str], None] = lambda line: None,
) -> VariantResult:
    """Replay `spec.days` of failures over `spec.nodes` nodes; see the module docstring."""
    import time

    began = time.monotonic()
    in_place = {c.strip() for c in spec.in_place_causes.split(",") if c.strip()}
    no_fault = {c.strip() for c in spec.no_fault_causes.split(",") if c.strip()}
    detect = detector or modelled_detector(in_place)
    horizon = spec.days * DAY
    month_s = 30.4375 * DAY
    months = months_of(spec)
    reference = load_reliability()
    gpus = spec.gpus_per_node
    ckpt = spec.checkpoint_minutes * 60
    restart = spec.restart_minutes * 60
    swap = spec.swap_minutes * 60

    # the jobs: fill the non-spare nodes with the mix, largest classes first
    spares_reserved = round(spec.nodes * spec.spare_fraction)
    working = spec.nodes - spares_reserved
    jobs: list[_Job] = []
    free = list(range(spec.nodes))
    classes = sorted(parse_job_mix(spec.job_mix), key=lambda c: -c.nodes)
    budget = {c.name: round(working * c.share) for c in classes}
    placed = 0
    for c in classes:
        size = min(c.nodes, working)
        while budget[c.name] >= size and placed + size <= working:
            jobs.append(_Job(len(jobs), c.name, free[placed : placed + size]))
            budget[c.name] -= size
            placed += size
    smallest = min(c.nodes for c in classes)
    while working - placed >= 1 and placed < working:  # leftovers: jobs of what still fits
        size = min(smallest, working - placed)
        jobs.append(_Job(len(jobs), classes[-1].name, free[placed : placed + size]))
        placed += size
    job_of: dict[int, _Job] = {n: j for j in jobs for n in j.nodes}
    spares = list(range(placed, spec.nodes))  # healthy idle nodes, ready to join a job
    waiting_jobs: list[_Job] = []

    result = VariantResult(name=name, changes=changes, spec=_spec_dict(spec), spares_reserved=len(spares))
    result.detection = detection
    lost_by_month = [0.0] * months
    alloc_by_month = [0.0] * months
    spares_out_by_month = [0] * months
    by_cause: Counter[str] = Counter()
    interrupted_by: Counter[str] = Counter()

    # one failure stream per node, seeded by (seed, node): every variant meets the same failures
    streams = [FaultProcess(random.Random(f"{spec.seed}:{n}"), reference, gpus) for n in range(spec.nodes)]
    repair_rng = random.Random(f"{spec.seed}:repairs")
    events: list[tuple[float, int, str, int]] = []
    seq = 0

    def push(at: float, kind: str, node: int) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(events, (at, seq, kind, node))

    for n, stream in enumerate(streams):
        push(stream.next_gap_seconds(), "fail", n)
    out_of_service: set[int] = set()
    in_burn_in: set[int] = set()
    infant_due: dict[int, float] = {}
    report_every = horizon / 10

    def month(at: float) -> int:
        return min(months - 1, int(at // month_s))

    def charge_down(job: _Job, start: float, end: float) -> None:
        """GPU-time of `job` lost from start to end, spread over the months it falls in."""
        size = len(job.nodes) * gpus
        while start < end:
            m = month(start)
            cut = min(end, (m + 1) * month_s)
            lost_by_month[m] += size * (cut - start) / HOUR
            start = cut

    def give_node(job: _Job, at: float) -> None:
        """A healthy node joins `job` (from the spares, or one back from repair)."""
        job.waiting -= 1
        if job.waiting == 0:
            down = job.down_until if job.down_until is not None else at
            result.replacement_wait_hours += (at - down) / HOUR
            result.longest_wait_hours = max(result.longest_wait_hours, (at - down) / HOUR)
            resume = at + swap + restart
            charge_down(job, down, min(resume, horizon))
            job.since = resume
            job.down_until = None
            if job in waiting_jobs:
                waiting_jobs.remove(job)

    def node_back(node: int, at: float) -> None:
        out_of_service.discard(node)
        if waiting_jobs:
            job = waiting_jobs[0]
            job.nodes.append(node)
            job_of[node] = job
            give_node(job, at)
        else:
            spares.append(node)

    next_report = report_every
    while events:
        at, _, kind, node = heapq.heappop(events)
        if at > horizon:
            break
        while at >= next_report:
            progress(f"{name}: day {next_report / DAY:,.0f} of {spec.days:,.0f}, {result.interruptions} interruptions")
            next_report += report_every
        m = month(at)
        if kind == "back":
            node_back(node, at)
            continue
        if kind == "burn_in_done":
            if node in in_burn_in:  # (an early failure during burn-in sent it back to repair)
                in_burn_in.discard(node)
                node_back(node, at)
            continue
        # a failure (the node's own stream, or an early failure after a swap)
        if kind == "fail":
            cause = streams[node].cause()
            push(at + streams[node].next_gap_seconds(), "fail", node)
        else:
            cause = "infant"
        if node in out_of_service:
            if node in in_burn_in and kind == "infant":
                result.caught_in_burn_in += 1
                result.technician_hours += spec.technician_hours_part_swap
                result.rmas += 1
                in_burn_in.discard(node)
                _repair(spec, node, at, push, spec.repair_hours_part_swap, repair_rng, infant_due, in_burn_in)
            continue  # a node in repair has nothing to interrupt
        result.failures += 1
        by_cause[cause] += 1
        pulled, how = detect(node, cause, spec.start + timedelta(seconds=at))
        needs_parts = cause not in in_place
        if pulled and cause in no_fault:
            result.false_pulls += 1
            result.false_pulls_by_cause[cause] = result.false_pulls_by_cause.get(cause, 0) + 1
        if needs_parts and not pulled:
            result.missed += 1
            result.missed_by_cause[cause] = result.missed_by_cause.get(cause, 0) + 1
            pulled = True  # the job crashes and the node is pulled by hand after the crash
        job = job_of.get(node)
        if node in spares:
            spares.remove(node)
        if job is not None and job.down_until is not None:
            # the job already stopped (waiting for a node): one more node to replace, no new loss
            job.nodes.remove(node)
            del job_of[node]
            job.waiting += 1
            job = None
        elif job is not None:
            result.interruptions += 1
            interrupted_by[cause] += 1
            lost_work = (at - job.since) % ckpt if at >= job.since else 0.0
            # the job has already been charged through its restart: lost work is since the checkpoint
            charge_down(job, at - lost_work, at)
            if pulled:
                job.nodes.remove(node)
                del job_of[node]
                job.waiting += 1
                if job.down_until is None:
                    job.down_until = at
                if spares:
                    spare = spares.pop(0)
                    job.nodes.append(spare)
                    job_of[spare] = job
                    give_node(job, at)
                elif job not in waiting_jobs:
                    waiting_jobs.append(job)
            else:
                charge_down(job, at, min(at + restart, horizon))
                job.since = at + restart
        if pulled:
            out_of_service.add(node)
            spares_out_by_month[m] = max(spares_out_by_month[m], len(out_of_service))
            hours = spec.repair_hours_in_place if not needs_parts else spec.repair_hours_part_swap
            result.technician_hours += (
                spec.technician_hours_in_place if not needs_parts else spec.technician_hours_part_swap
            )
            if needs_parts:
                result.rmas += 1
            _repair(spec, node, at, push, hours, repair_rng, infant_due, in_burn_in, swapped=needs_parts)
    # close: jobs still waiting at the horizon lose the rest of the run
    for job in waiting_jobs:
        if job.down_until is not None:
            charge_down(job, job.down_until, horizon)
    total_gpus = sum(len(j.nodes) + j.waiting for j in jobs) * gpus
    for m in range(months):
        span = min(horizon, (m + 1) * month_s) - m * month_s
        alloc_by_month[m] = total_gpus * max(0.0, span) / HOUR
    result.by_cause = dict(sorted(by_cause.items(), key=lambda kv: -kv[1]))
    result.interruptions_by_cause = dict(sorted(interrupted_by.items(), key=lambda kv: -kv[1]))
    result.allocated_gpu_hours = round(sum(alloc_by_month), 3)
    result.lost_gpu_hours = round(min(sum(lost_by_month), result.allocated_gpu_hours), 3)
    result.goodput = 1 - result.lost_gpu_hours / result.allocated_gpu_hours if result.allocated_gpu_hours else 1.0
    result.goodput_by_month = [
        round(1 - min(lost, alloc) / alloc, 6) if alloc else 1.0
        for lost, alloc in zip(lost_by_month, alloc_by_month, strict=True)
    ]
    # SLA credits: the policy's rate x list price x provider-caused lost GPU-time, capped per month
    credits = []
    for m in range(months):
        owed = spec.sla_credit_rate * spec.price_per_gpu_hour * Decimal(str(round(lost_by_month[m], 6)))
        cap = spec.price_per_gpu_hour * Decimal(str(round(alloc_by_month[m], 6))) * spec.sla_cap_percent / 100
        credits.append(min(owed, cap).quantize(Decimal("0.01")))
    result.credits_by_month = [str(c) for c in credits]
    result.sla_credits = sum(credits, Decimal("0"))
    result.spares_used_by_month = spares_out_by_month
    result.spares_used_peak = max(spares_out_by_month) if spares_out_by_month else 0
    result.replacement_wait_hours = round(result.replacement_wait_hours, 3)
    for job in waiting_jobs:  # still waiting at the end: as long as the run let it
        if job.down_until is not None:
            result.longest_wait_hours = max(result.longest_wait_hours, (horizon - job.down_until) / HOUR)
    result.longest_wait_hours = round(result.longest_wait_hours, 3)
    result.technician_hours = round(result.technician_hours, 2)
    result.wall_seconds = round(time.monotonic() - began, 3)
    progress(f"{name}: done, {result.interruptions} interruptions, goodput {result.goodput:.2%}")
    return result


def spares_needed(spec: TwinSpec, target_hours: float) -> int | None:
    """The fewest spare nodes for which no job of `spec`'s run waits longer than `target_hours`
    for a replacement (modelled detection; the same seed, so the same failures at every count).
    A binary search over the count, which takes more spares never to lengthen the longest wait
    (the tests compare it with a scan of every count). None if even half the fleet as spares
    (the bound) does not meet the target."""

    def meets(count: int) -> bool:
        variant = replace(spec, spare_fraction=count / spec.nodes)
        return run_variant(variant).longest_wait_hours <= target_hours

    low, high = 0, spec.nodes // 2
    if not meets(high):
        return None
    while low < high:
        middle = (low + high) // 2
        if meets(middle):
            high = middle
        else:
            low = middle + 1
    return low


def _repair(spec, node, at, push, hours, rng, infant_due, in_burn_in, *, swapped: bool = True) -> None:
    """The node is back after `hours`; after a part swap it burns in first, and may fail early."""
    back = at + hours * HOUR
    if swapped and rng.random() < spec.infant_failure_share:
        infant_due[node] = back + rng.uniform(0, spec.infant_window_days * DAY)
        push(infant_due[node], "infant", node)
    if swapped and spec.burn_in_days > 0:
        in_burn_in.add(node)
        push(back + spec.burn_in_days * DAY, "burn_in_done", node)
    else:
        push(back, "back", node)


def _spec_dict(spec: TwinSpec) -> dict:
    data = asdict(spec)
    for key, value in data.items():
        if isinstance(value, Decimal):
            data[key] = str(value)
        elif isinstance(value, datetime):
            data[key] = value.isoformat()
    return data


# ---- reports -------------------------------------------------------------------------------

CSV_COLUMNS = (
    "name",
    "changes",
    "detection",
    "interruptions",
    "replacement_wait_hours",
    "longest_wait_hours",
    "spares_needed",
    "failures",
    "goodput",
    "lost_gpu_hours",
    "allocated_gpu_hours",
    "sla_credits",
    "spares_reserved",
    "spares_used_peak",
    "technician_hours",
    "rmas",
    "false_pulls",
    "missed",
    "caught_in_burn_in",
)


def report_csv(results: list[VariantResult]) -> str:
    out = io.StringIO()
    causes = sorted({c for r in results for c in r.by_cause})
    writer = csv.writer(out)
    writer.writerow([*CSV_COLUMNS, *(f"cause_{c}" for c in causes)])
    for r in results:
        row = r.as_dict()
        writer.writerow([row[c] for c in CSV_COLUMNS] + [r.by_cause.get(c, 0) for c in causes])
    return out.getvalue()


def _causes(counts: dict[str, int]) -> str:
    return (
        " (" + ", ".join(f"{c} {n}" for c, n in sorted(counts.items(), key=lambda kv: -kv[1])) + ")" if counts else ""
    )


def summary_lines(results: list[VariantResult]) -> list[str]:
    lines = []
    for r in results:
        causes = ", ".join(f"{c} {n}" for c, n in r.interruptions_by_cause.items())
        lines.append(
            f"{r.name}: goodput {r.goodput:.2%} (modelled), {r.failures} failures, {r.interruptions} job "
            f"interruptions ({causes}), replacement waits {r.replacement_wait_hours:,.0f} h (longest {r.longest_wait_hours:,.1f} h)"
            + (
                ""
                if r.spares_needed is None
                else f", {r.spares_needed} spares keep every wait within {r.wait_target_hours:g} h"
            )
            + f", SLA credits ${r.sla_credits:,} (estimated), spares {r.spares_reserved} reserved / "
            f"peak {r.spares_used_peak} out of service, {r.technician_hours:,.0f} technician-hours, {r.rmas} RMAs, "
            f"{r.false_pulls} false pulls{_causes(r.false_pulls_by_cause)}, {r.missed} missed"
            f"{_causes(r.missed_by_cause)}, {r.caught_in_burn_in} caught in burn-in; "
            f"detection: {r.detection}; {r.wall_seconds:.1f} s"
        )
    return lines


def compare(results: list[VariantResult]) -> dict:
    return {
        "variants": [r.as_dict() for r in results],
        "by_cause_total": dict(sum((Counter(r.by_cause) for r in results), Counter())),
    }


def by_name(results: list[VariantResult]) -> dict[str, VariantResult]:
    return {r.name: r for r in results}


# ---- the check against the Llama 3 paper ------------------------------------------------------

LLAMA3_CONFIDENCE = 0.999  # per figure: 13 figures at 99.9 % each, ~1.3 % chance one falls out by luck


def poisson_interval(mean: float, confidence: float = LLAMA3_CONFIDENCE) -> tuple[int, int]:
    """The central `confidence` interval of a Poisson count of this mean (exact, by its CDF)."""
    import math

    tail = (1 - confidence) / 2
    k, pmf = 0, math.exp(-mean) if mean < 700 else 0.0
    if pmf == 0.0:  # beyond floats' reach: the normal approximation is exact enough there
        half = 3.29 * math.sqrt(mean)
        return max(0, math.floor(mean - half)), math.ceil(mean + half)
    cdf, low = pmf, None
    while True:
        if low is None and cdf > tail:
            low = k
        if cdf >= 1 - tail:
            return low, k
        k += 1
        pmf *= mean / k
        cdf += pmf


def llama3_comparison(result: VariantResult) -> list[dict]:
    """The twin's failures beside the paper's Table 5: the published count (419 unexpected
    interruptions) and each cause's share of it, with the Poisson bounds a run of this length
    and size would fall within if it followed the published rate and mix. The paper's count is
    of the whole 16,384-GPU job; the twin's is every node's failures (in the job or standing by)."""
    reference = load_reliability()
    ref = load_twin_reference()
    # a run of another size or length is compared with the paper's figures scaled by GPU-days
    gpu_days = result.spec["nodes"] * result.spec["gpus_per_node"] * result.spec["days"]
    scale = gpu_days / (float(ref["llama3_gpus"]) * float(ref["llama3_window_days"]))
    rows = []
    published_total = int(ref["llama3_unexpected_interruptions"]) * scale
    seen = sum(n for c, n in result.by_cause.items() if c != "infant")
    low, high = poisson_interval(published_total)
    rows.append({"cause": "all unexpected", "paper": round(published_total, 1), "twin": seen, "low": low, "high": high})
    for cause, share in sorted(reference.cause_mix.items(), key=lambda kv: -kv[1]):
        mean = published_total * share
        low, high = poisson_interval(mean)
        rows.append(
            {"cause": cause, "paper": round(mean, 1), "twin": result.by_cause.get(cause, 0), "low": low, "high": high}
        )
    for row in rows:
        row["within"] = row["low"] <= row["twin"] <= row["high"]
    return rows
