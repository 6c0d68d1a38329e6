"""What the fleet simulator measures: the lag of every kind of agent call and the age of
every agent's heartbeat, summarised once a minute, with a plain verdict when the server (or
the simulator itself) cannot keep the agents on schedule.

The numbers are wall-clock, measured in the simulator: an HTTP call's latency is from sending
to the answer; a heartbeat's age is the gap between two accepted heartbeats of the same agent
(what the server's lease sees just before it is renewed), and agents whose last accepted
heartbeat is older than the interval allows count as silent.
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


def _percentile(values: list[float], share: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


@dataclass
class CallStats:
    """Thread-safe counters filled by every lane's session, read and reset by `take()`."""

    latency: dict[str, list[float]] = field(default_factory=dict)  # kind → seconds
    errors: dict[str, int] = field(default_factory=dict)  # kind → failed calls (transport or ≥ 500)
    refused: dict[str, int] = field(default_factory=dict)  # kind → 4xx answers
    gaps: list[float] = field(default_factory=list)  # seconds between accepted heartbeats
    last_beat: dict[str, float] = field(default_factory=dict)  # agent key → monotonic time
    since: float = field(default_factory=time.monotonic)

    def __post_init__(self):
        self.lock = threading.Lock()

    def record(self, kind: str, agent: str, seconds: float, status: int | None) -> None:
        now = time.monotonic()
        with self.lock:
            self.latency.setdefault(kind, []).append(seconds)
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
        now = time.monotonic()
        with self.lock:
            latency, errors, refused, gaps = self.latency, self.errors, self.refused, self.gaps
            self.latency, self.errors, self.refused, self.gaps = {}, {}, {}, []
            silent = sum(1 for t in self.last_beat.values() if now - t > interval * LATE_FACTOR)
            never = max(0, agents - len(self.last_beat))
            window, self.since = now - self.since, now
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
                )
                for kind, values in sorted(latency.items())
            },
            age_p50_s=_percentile(gaps, 0.5),
            age_p99_s=_percentile(gaps, 0.99),
            silent=silent + never,
        )


@dataclass(frozen=True)
class CallFigures:
    count: int
    p50_ms: float
    p99_ms: float
    errors: int
    refused: int
    busy_s: float


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

    lines = [
        f"{summary.agents} agents, last {summary.window_s:.0f} s: heartbeat age p50 {seconds(summary.age_p50_s)}, "
        f"p99 {seconds(summary.age_p99_s)} (interval {summary.interval_s:.0f} s); "
        f"{summary.silent} silent > {summary.interval_s * LATE_FACTOR:.0f} s; longest lane pass {summary.tick_s:.1f} s"
    ]
    for kind, c in summary.calls.items():
        rate = c.count / summary.window_s if summary.window_s > 0 else 0.0
        lines.append(
            f"  {kind:<15} {c.count:>7} calls ({rate:,.0f}/s)  p50 {c.p50_ms:,.0f} ms  p99 {c.p99_ms:,.0f} ms"
            f"  errors {c.errors}  refused {c.refused}"
        )
    if summary.keeping_up:
        return lines
    if summary.lane_busy_share >= BUSY_SHARE:
        lines.append(
            f"NOT KEEPING UP: the server cannot answer {summary.agents} agents on schedule — the "
            f"{summary.lanes} HTTP lanes waited on it {summary.lane_busy_share:.0%} of the time. "
            "Run more web workers (docs/PERFORMANCE.md, 'web workers per 10,000 nodes'), "
            "or simulate fewer nodes."
        )
    else:
        lines.append(
            f"NOT KEEPING UP: the simulator itself is behind (its HTTP lanes were busy only "
            f"{summary.lane_busy_share:.0%} of the time, its longest lane pass took {summary.tick_s:.1f} s): "
            "this process is short of CPU. Give it more --workers, a quieter machine, or fewer nodes."
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
        self.stats.record(kind, agent, time.monotonic() - started, response.status_code)
        return response
