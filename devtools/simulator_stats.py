"""What the fleet simulator measures: the lag of every kind of agent call and the age of
every agent's heartbeat, summarised once a minute, with a plain verdict when the server (or
the simulator itself) cannot keep the agents on schedule.

The numbers are wall-clock, measured in the simulator: an HTTP call's latency is from sending
to the answer; a heartbeat's age is the gap between two accepted heartbeats of the same agent
(what the server's lease sees just before it is renewed), and agents whose last accepted
heartbeat is older than the interval allows count as silent. Beside each call's latency stands
the time the server's application spent on it (its `Server-Timing: app;dur=` header), and
beside the window the CPU this process used and how busy the machine's CPU was: a slow answer whose
handler was quick waited in a queue (the web server's, with every worker busy) or in this
process, and the verdict says which.
"""

import threading
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import requests

# A heartbeat this late (1.5 × the 10 s interval) is "behind schedule"; the lease makes a node
# `unknown` at 40 s (health.policy.HEARTBEAT_UNKNOWN_AFTER).
LATE_FACTOR = 1.5
# HTTP lanes busy this share of the wall clock: the server's answers are the bottleneck.
BUSY_SHARE = 0.8
# The application's own time under this share of a call's latency: the call mostly waited
# outside the handler (a queue before a worker took it, or this process's threads).
HANDLER_SHARE = 0.5
# A machine whose cores are busy this share of the window has no CPU to spare: when the
# simulator shares it with the server, both are short, and more web workers would not help.
# (Not the load average: the simulator's own hundreds of lane threads inflate it.)
BUSY_MACHINE = 0.85


def server_time_s(header: str | None) -> float | None:
    """The `app` duration of a Server-Timing header ("app;dur=4.2" → 0.0042 s), if any."""
    for metric in (header or "").split(","):
        name, *params = metric.split(";")
        if name.strip() != "app":
            continue
        for param in params:
            key, _, value = param.strip().partition("=")
            if key == "dur":
                try:
                    return float(value) / 1000
                except ValueError:
                    return None
    return None


def machine_cpu_times() -> tuple[int, int] | None:
    """(busy, total) CPU ticks of the whole machine so far, from /proc/stat; None off Linux."""
    try:
        with open("/proc/stat") as stat:
            ticks = [int(v) for v in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = sum(ticks[3:5])  # idle + iowait
    return sum(ticks) - idle, sum(ticks)


def _percentile(values: list[float], share: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


@dataclass
class CallStats:
    """Thread-safe counters filled by every lane's session, read and reset by `take()`."""

    latency: dict[str, list[float]] = field(default_factory=dict)  # kind → seconds
    handler: dict[str, list[float]] = field(default_factory=dict)  # kind → the server's own seconds
    errors: dict[str, int] = field(default_factory=dict)  # kind → failed calls (transport or ≥ 500)
    refused: dict[str, int] = field(default_factory=dict)  # kind → 4xx answers
    gaps: list[float] = field(default_factory=list)  # seconds between accepted heartbeats
    last_beat: dict[str, float] = field(default_factory=dict)  # agent key → monotonic time
    since: float = field(default_factory=time.monotonic)
    cpu_since: float = field(default_factory=time.process_time)
    machine_since: tuple[int, int] | None = field(default_factory=machine_cpu_times)

    def __post_init__(self):
        self.lock = threading.Lock()

    def record(
        self, kind: str, agent: str, seconds: float, status: int | None, server_seconds: float | None = None
    ) -> None:
        now = time.monotonic()
        with self.lock:
            self.latency.setdefault(kind, []).append(seconds)
            if server_seconds is not None:
                self.handler.setdefault(kind, []).append(server_seconds)
            if status is None or status >= 500:
                self.errors[kind] = self.errors.get(kind, 0) + 1
            elif status >= 400:
                self.refused[kind] = self.refused.get(kind, 0) + 1
            elif kind == "heartbeat":
                previous = self.last_beat.get(agent)
                if previous is not None:
                    self.gaps.append(now - previous)
                self.last_beat[agent] = now

    def take(self, *, agents: int, lanes: int, interval: float) -> "LagSummary":
        """The summary since the previous take; the counters start again."""
        now, cpu, machine = time.monotonic(), time.process_time(), machine_cpu_times()
        with self.lock:
            latency, handler, errors, refused, gaps = self.latency, self.handler, self.errors, self.refused, self.gaps
            self.latency, self.handler, self.errors, self.refused, self.gaps = {}, {}, {}, {}, []
            silent = sum(1 for t in self.last_beat.values() if now - t > interval * LATE_FACTOR)
            never = max(0, agents - len(self.last_beat))
            window, self.since = now - self.since, now
            cpu_used, self.cpu_since = cpu - self.cpu_since, cpu
            machine_busy = None
            if machine and self.machine_since and machine[1] > self.machine_since[1]:
                machine_busy = (machine[0] - self.machine_since[0]) / (machine[1] - self.machine_since[1])
            self.machine_since = machine
        return LagSummary(
            window_s=window,
            agents=agents,
            lanes=lanes,
            interval_s=interval,
            calls={
                kind: CallFigures(
                    count=len(values),
                    p50_ms=_percentile(values, 0.5) * 1000,
                    p99_ms=_percentile(values, 0.99) * 1000,
                    errors=errors.get(kind, 0),
                    refused=refused.get(kind, 0),
                    busy_s=sum(values),
                    server_p50_ms=None if not handler.get(kind) else _percentile(handler[kind], 0.5) * 1000,
                )
                for kind, values in sorted(latency.items())
            },
            age_p50_s=_percentile(gaps, 0.5),
            age_p99_s=_percentile(gaps, 0.99),
            silent=silent + never,
            process_cores=cpu_used / window if window > 0 else None,
            machine_busy=machine_busy,
        )


@dataclass(frozen=True)
class CallFigures:
    count: int
    p50_ms: float
    p99_ms: float
    errors: int
    refused: int
    busy_s: float
    server_p50_ms: float | None = None  # the application's own time (Server-Timing), if the server sent it


@dataclass(frozen=True)
class LagSummary:
    window_s: float
    agents: int
    lanes: int
    interval_s: float
    calls: dict[str, CallFigures]
    age_p50_s: float | None
    age_p99_s: float | None
    silent: int  # agents with no accepted heartbeat within 1.5 × the interval
    tick_s: float = 0.0  # the longest lane pass of the window (set by the command)
    process_cores: float | None = None  # CPU this process used over the window, in cores
    machine_busy: float | None = None  # share of the machine's CPU time busy over the window

    @property
    def handler_share(self) -> float | None:
        """The application's p50 time as a share of the calls' p50 latency (call-weighted), or
        None when the server sent no Server-Timing."""
        timed = [c for c in self.calls.values() if c.server_p50_ms is not None and c.p50_ms > 0]
        if not timed:
            return None
        weight = sum(c.count for c in timed)
        return sum(c.count * min(1.0, c.server_p50_ms / c.p50_ms) for c in timed) / weight

    @property
    def lane_busy_share(self) -> float:
        """How much of the window the HTTP lanes spent waiting for answers."""
        busy = sum(c.busy_s for c in self.calls.values())
        return busy / (self.lanes * self.window_s) if self.window_s > 0 and self.lanes else 0.0

    @property
    def keeping_up(self) -> bool:
        late = self.age_p99_s is not None and self.age_p99_s > self.interval_s * LATE_FACTOR
        return not late and not self.silent


def lag_report(summary: LagSummary) -> list[str]:
    """The once-a-minute lines: heartbeat age, per-call lag, and a verdict naming the bottleneck."""

    def seconds(value: float | None) -> str:
        return "–" if value is None else f"{value:.1f} s"

    machine = []
    if summary.process_cores is not None:
        machine.append(f"this process {summary.process_cores:.2f} cores")
    if summary.machine_busy is not None:
        machine.append(f"machine CPU {summary.machine_busy:.0%} busy")
    lines = [
        f"{summary.agents} agents, last {summary.window_s:.0f} s: heartbeat age p50 {seconds(summary.age_p50_s)}, "
        f"p99 {seconds(summary.age_p99_s)} (interval {summary.interval_s:.0f} s); "
        f"{summary.silent} silent > {summary.interval_s * LATE_FACTOR:.0f} s; longest lane pass {summary.tick_s:.1f} s"
        + (f"; {', '.join(machine)}" if machine else "")
    ]
    for kind, c in summary.calls.items():
        rate = c.count / summary.window_s if summary.window_s > 0 else 0.0
        handler = "" if c.server_p50_ms is None else f" (server {c.server_p50_ms:,.1f} ms)"
        lines.append(
            f"  {kind:<15} {c.count:>7} calls ({rate:,.0f}/s)  p50 {c.p50_ms:,.0f} ms{handler}  p99 {c.p99_ms:,.0f} ms"
            f"  errors {c.errors}  refused {c.refused}"
        )
    if summary.keeping_up:
        return lines
    share = summary.handler_share
    lanes_busy = summary.lane_busy_share >= BUSY_SHARE
    handlers_slow = share is None or share >= HANDLER_SHARE
    handlers = "" if share is None else f"the server's handlers took {share:.0%} of a call's p50; "
    if lanes_busy and handlers_slow:
        lines.append(
            f"NOT KEEPING UP: the server cannot answer {summary.agents} agents on schedule — the "
            f"{summary.lanes} HTTP lanes waited on it {summary.lane_busy_share:.0%} of the time"
            + ("" if share is None else f", and its handlers took {share:.0%} of each call's p50")
            + ". Run more web workers (docs/PERFORMANCE.md, 'web workers per 10,000 nodes'), "
            "or simulate fewer nodes."
        )
    elif summary.machine_busy is not None and summary.machine_busy >= BUSY_MACHINE:
        lines.append(
            f"NOT KEEPING UP: this machine is short of CPU — {handlers}its CPU was "
            f"{summary.machine_busy:.0%} busy, {summary.process_cores or 0:.2f} cores of it this process. "
            "If the server runs here too, the simulator and the server share the cores: "
            "run the simulator on another machine, or simulate fewer nodes; more web workers "
            "or simulator processes would only split the same cores."
        )
    elif lanes_busy:
        lines.append(
            f"NOT KEEPING UP: every web worker is busy — {handlers}the rest was spent waiting for a "
            "worker to take the request (the machine has CPU to spare). Run more web workers "
            "(docs/PERFORMANCE.md, 'web workers per 10,000 nodes'), or simulate fewer nodes."
        )
    else:
        lines.append(
            f"NOT KEEPING UP: the simulator itself is behind (its HTTP lanes were busy only "
            f"{summary.lane_busy_share:.0%} of the time, its longest lane pass took {summary.tick_s:.1f} s"
            + ("" if summary.process_cores is None else f", this process used {summary.process_cores:.2f} cores")
            + "): this process is short of CPU (one Python process runs its lanes on about one core). "
            "Give it more --workers, split the fleet across processes (--part 1/2 and --part 2/2), "
            "a quieter machine, or fewer nodes."
        )
    return lines


class TimedSession(requests.Session):
    """A session that reports every call's latency and status to `stats`, by kind of call (the
    last path segment: heartbeat, desired-state, …) and by agent (its bearer token)."""

    def __init__(self, stats: CallStats, pool: int):
        super().__init__()
        self.stats = stats
        adapter = requests.adapters.HTTPAdapter(pool_connections=1, pool_maxsize=pool)
        self.mount("http://", adapter)
        self.mount("https://", adapter)

    def request(self, method, url, *args, **kwargs):
        kind = urlsplit(url).path.rstrip("/").rpartition("/")[2]
        agent = (kwargs.get("headers") or {}).get("Authorization", "")
        started = time.monotonic()
        try:
            response = super().request(method, url, *args, **kwargs)
        except Exception:
            self.stats.record(kind, agent, time.monotonic() - started, None)
            raise
        self.stats.record(
            kind,
            agent,
            time.monotonic() - started,
            response.status_code,
            server_time_s(response.headers.get("Server-Timing")),
        )
        return response
