"""The fleet simulator: one simulated node agent per node, all in one process.

Every agent is the real `hangar_agent.Agent` on a simulated hardware backend, talking to the
control plane over the real HTTP endpoints. Agents are dealt into `workers` lanes, each lane
one thread with its own HTTP session (connection pool). `run` lets every lane pass over its own
agents on its own clock, so a slow answer (or a heavy first health report) holds up only its
lane's next few agents, never the fleet; `step` ticks every lane once and waits for all of them,
which is what tests stepping simulated time need. Every call's latency and every agent's heartbeat
age is measured (devtools.simulator_stats). Faults come from the agent's simulated hardware
at the rates and cause mix of core/reference/reliability.csv; a scripted scenario ("xid 79 on
gpu 3 at 30s") can be given per node for tests and demos.

Identity per tenancy: a node's token stops working when its wipe begins; the simulated node then
reads the handoff file the control plane published for it (settings.AGENT_HANDOFF_DIR, what a
deployment's network-boot service serves to the wipe image) and claims its new token over HTTP,
so the simulator must run on the control plane's machine (or see that directory) for nodes to
come back after a tenancy.

One clock: the live simulator ticks its agents on the wall clock, whatever the speed. `speed`
compresses only durations (provisioning, wipes, reboots, upgrades, outages) and the gaps
between faults, through the simulated hardware's `wall()`: a 30-minute wipe takes 30 s at
speed 60, a node sees a day's faults in 24 minutes. Every heartbeat, report and meter event
is therefore stamped with the server's own time, so an accelerated demo still meters and
bills. (It used to tick simulated time, `speed` x the wall time since start: at speed 60 every
meter event ended hours after the ledger's clock and was refused as `outside_grant`.)
Reports are also stamped with this machine's clock when a test steps time forward with
`step(now)`: the server refuses reports stamped more than 300 s from its own clock.
For a simulated year, with time that jumps, see the twin (devtools.twin).
"""

import logging
import random
import threading
import time
import zlib
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from django.db import DatabaseError, close_old_connections

from core.api.agent_tokens import mint_agent_token
from core.services.agent_credentials import handoff_path
from devtools.simulator_stats import CallStats, LagSummary, TimedSession
from fleet.choices import Lifecycle
from fleet.models import Node
from hangar_agent.agent import Agent, read_handoff, simulated_agent

GONE = (Lifecycle.RETIRED, Lifecycle.DISPOSED)
MAX_WORKERS = 256
NEW_NODES_PER_QUERY = 1000  # hostnames in one IN list (SQLite bounds a statement's parameters)
# A real fleet has one agent per node, each with its own connection; a lane stands in for a few.
# With 16 agents to a lane, a lane's pass reached 5-10 s whenever one of its agents met a slow
# answer, and heartbeats due behind it went out that late.
AGENTS_PER_LANE = 4
log = logging.getLogger(__name__)


# ...but not more than this many by default. The lanes are threads of one Python process and
# take turns at its interpreter lock: with 256 lanes for 2,048 agents each call waited p50
# 520 ms for its turn (the server's handler took 4 ms of it); with 64, p50 120-130 ms and the
# heartbeat gap's p99 12.5-12.8 s instead of 13.7-15.4 s on the same machine.
DEFAULT_MAX_LANES = 64


def lanes_for(agents: int) -> int:
    """How many lanes to deal `agents` into when the caller does not say."""
    return max(1, min(DEFAULT_MAX_LANES, -(-agents // AGENTS_PER_LANE)))


def check_part(part: tuple[int, int]) -> tuple[int, int]:
    """`part` if it names share k of n with 1 <= k <= n; ValueError otherwise."""
    k, n = part
    if not 1 <= k <= n:
        raise ValueError(f"share {k}/{n} is not K/N with 1 <= K <= N")
    return part


def parse_part(text: str) -> tuple[int, int]:
    """Parse "K/N" into (k, n) by check_part's rule; ValueError otherwise."""
    k, sep, n = text.partition("/")
    if not sep:
        raise ValueError(f"{text!r} is not K/N")
    return check_part((int(k), int(n)))  # int() raises ValueError on anything but digits


def in_part(hostname: str, part: tuple[int, int] | None) -> bool:
    """Whether `hostname` belongs to share k of n (`part` = (k, n); None: the whole fleet)."""
    if part is None:
        return True
    k, n = part
    return zlib.crc32(hostname.encode()) % n == k - 1


def _live_nodes():
    """The nodes that have an agent to simulate (not retired or disposed)."""
    return Node.objects.exclude(lifecycle__in=GONE)


def count_simulated_nodes(part: tuple[int, int] | None = None) -> int:
    """How many agents `FleetSimulator.refresh` would start for `part` (the same selection)."""
    hostnames = _live_nodes().values_list("hostname", flat=True)
    return sum(1 for hostname in hostnames.iterator() if in_part(hostname, part))


def server_clock(_simulated: datetime) -> datetime:
    """What reports are stamped with: this machine's (the server's) clock, whatever the tick's."""
    return datetime.now(UTC)


@dataclass
class FleetSimulator:
    url: str
    speed: float = 1.0
    seed: int = 1
    scenarios: dict[str, str] = field(default_factory=dict)  # hostname → scenario text
    missing_software: dict[str, set[str]] = field(default_factory=dict)  # hostname → layers not installed
    hostnames: Iterable[str] | None = None  # limit to these nodes (tests)
    # (k, n): simulate only the k-th of n shares of the fleet (1-based), so n processes, each a
    # Python process running its lanes on about one core, can together drive a larger fleet.
    # A node's share follows from its hostname alone, so the n processes never overlap.
    part: tuple[int, int] | None = None
    agents: dict[str, Agent] = field(default_factory=dict)
    leaf_of: dict[str, str] = field(default_factory=dict)  # hostname → "fabric-domain/leaf"
    failed_leaves: set[str] = field(default_factory=set)  # leaf switches the simulation has killed
    refresh_failures: int = 0
    counter_dir: str | None = None  # where each simulated node keeps its energy counters
    workers: int = 16  # concurrent lanes (threads, each with its own HTTP session)
    heartbeat_interval: float = 10.0  # the agents' (AgentConfig default); the lag report judges by it
    # Agents keep phases of their own, as a fleet's real agents (booted at different times) do:
    # each new agent's first calls are spread over their intervals, and each agent ticks at the
    # time it really runs. In lockstep, 256 agents sent their heavy first reports in one 31 s
    # tick, and every 10 s one step carried all 512 calls, aging heartbeats to 13-17 s.
    stagger: bool = False
    # The agents' meter interval (wall seconds; None: the agent's default). Tests shorten it
    # to see usage close within seconds.
    meter_interval: float | None = None

    def __post_init__(self):
        if not 1 <= self.workers <= MAX_WORKERS:
            raise ValueError(f"workers must be 1..{MAX_WORKERS}, got {self.workers}")
        if self.part is not None:
            check_part(self.part)
        if self.counter_dir:
            Path(self.counter_dir).mkdir(parents=True, exist_ok=True)
        self.rng = random.Random(self.seed)
        self.stats = CallStats()
        # One session per lane: a lane's agents run one after another on its thread, so no
        # session is ever used by two threads at once.
        self.sessions = [TimedSession(self.stats, pool=2) for _ in range(self.workers)]
        self.lane_of: dict[str, int] = {}
        # Each lane's members, replaced whole by `refresh` (never changed in place) so a running
        # lane thread reads either the old tuple or the new one, never a dict being resized.
        self.lanes: list[tuple[tuple[str, Agent], ...]] = [() for _ in range(self.workers)]
        self.pool = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="agent-lane")
        self._next_lane = 0
        self._longest_pass = 0.0
        self._pass_lock = threading.Lock()

    def close(self) -> None:
        self.pool.shutdown(wait=True)
        for session in self.sessions:
            session.close()

    def lag(self) -> LagSummary:
        """The calls' latency and heartbeat ages since the last call (devtools.simulator_stats)."""
        return self.stats.take(agents=len(self.agents), lanes=self.workers, interval=self.heartbeat_interval)

    def refresh(self, start: datetime) -> int:
        """Start agents for nodes that appeared; stop those of nodes that left. Returns the count.

        The simulator reads the node list straight from the database; when the database is
        away the agents it already runs keep running (and keep their queues) and the list
        is read again on the next refresh, so an outage never takes the fleet down with it."""
        listed = _live_nodes()
        if self.hostnames is not None:
            listed = listed.filter(hostname__in=list(self.hostnames))
        try:
            # Each pass reads three columns a node; whole rows (type, drives) only for new nodes.
            # Reading every node with its drives each minute was 1.9 s of CPU at 2,048 nodes,
            # holding the interpreter lock the lanes need, so every lane stalled with it.
            current = {
                hostname: (leaf, domain)
                for hostname, leaf, domain in listed.values_list("hostname", "leaf_switch", "fabric_domain__name")
                if in_part(hostname, self.part)
            }
            arrived = [hostname for hostname in current if hostname not in self.agents]
            nodes = [
                node
                for at in range(0, len(arrived), NEW_NODES_PER_QUERY)
                for node in _live_nodes()
                .filter(hostname__in=arrived[at : at + NEW_NODES_PER_QUERY])
                .select_related("node_type")
                .prefetch_related("drives")
            ]
        except DatabaseError as exc:
            self.refresh_failures += 1
            log.warning("node list unavailable (%s); keeping %d running agents", exc, len(self.agents))
            close_old_connections()
            return len(self.agents)
        for hostname, (leaf, domain) in current.items():
            if leaf:
                self.leaf_of[hostname] = f"{domain or '-'}/{leaf}"
        for hostname in set(self.agents) - set(current):
            del self.agents[hostname]
            self.lane_of.pop(hostname, None)
        for node in nodes:
            hostname = node.hostname
            if hostname not in self.agents:
                lane = self.lane_of[hostname] = self._next_lane
                self._next_lane = (self._next_lane + 1) % self.workers
                self.agents[hostname] = simulated_agent(
                    url=self.url,
                    token=mint_agent_token(node.pk),
                    hostname=hostname,
                    session=self.sessions[lane],
                    stamp=server_clock,
                    heartbeat_interval=self.heartbeat_interval,
                    rng=self.rng,
                    start=start,
                    speed=self.speed,
                    generation=node.node_type.generation,
                    gpu_count=node.node_type.gpus_per_node,
                    sku=node.node_type.slug,
                    scenario=self.scenarios.get(hostname),
                    missing_software=self.missing_software.get(hostname),
                    drives=[
                        {
                            "serial": d.serial,
                            "model": d.model,
                            "capacity_gb": d.capacity_gb,
                            "self_encrypting": d.self_encrypting,
                            "purge_supported": d.purge_supported,
                        }
                        for d in node.drives.all()
                    ],
                    counter_file=str(Path(self.counter_dir) / f"{hostname}.json") if self.counter_dir else None,
                    # The provisioning channel: when the node's wipe begins its token stops working and
                    # the control plane publishes the one-time handoff of the next identity, which the
                    # simulated wipe image reads here (a real one is served it on the provisioning network).
                    handoff=_handoff_reader(node.pk),
                    **({"meter_interval": self.meter_interval} if self.meter_interval else {}),
                )
                if self.stagger:
                    self._stagger(self.agents[hostname], start)
        lanes: list[list[tuple[str, Agent]]] = [[] for _ in range(self.workers)]
        for hostname, agent in self.agents.items():
            lanes[self.lane_of[hostname]].append((hostname, agent))
        self.lanes = [tuple(members) for members in lanes]
        return len(self.agents)

    def _stagger(self, agent: Agent, start: datetime) -> None:
        """First heartbeat and poll within one heartbeat interval; first health and software
        reports within the first minute (both are due at once on a fresh agent otherwise)."""
        first = timedelta(seconds=self.rng.uniform(0, self.heartbeat_interval))
        agent.next_heartbeat = agent.next_desired = start + first
        agent.next_health = start + timedelta(seconds=self.rng.uniform(0, 60))
        agent.next_software = start + timedelta(seconds=self.rng.uniform(0, 60))

    def fail_leaf(self, leaf: str) -> list[str]:
        """Kill a leaf switch ("fabric-domain/leaf"): every node behind it falls silent at once
        (the simulation stops stepping their agents until `restore_leaf`). Returns their hostnames."""
        self.failed_leaves.add(leaf)
        return sorted(h for h, name in self.leaf_of.items() if name == leaf and h in self.agents)

    def restore_leaf(self, leaf: str) -> None:
        self.failed_leaves.discard(leaf)

    def step(self, now: datetime) -> None:
        """One tick of every agent (each does only what is due), the lanes side by side; returns
        when every lane is done. A failing tick is logged and the lane's next agent goes on: one
        agent's error never stops the fleet."""
        # Staggered agents keep their own phase: each ticks at the time it really runs (the
        # step's `now` plus the wall time since the step began), not the step's start, or one
        # slow step would line every agent it ran up again.
        started = time.monotonic()
        lanes = [self._reachable(members) for members in self.lanes]
        for done in [self.pool.submit(_tick_lane, lane, now, started, self.stagger) for lane in lanes if lane]:
            done.result()

    def run(self, stop: threading.Event, *, tick: float = 1.0) -> list[Future]:
        """Free-running lanes until `stop` is set: each lane passes over its own agents once a
        `tick` (wall seconds), on its own, on the wall clock (`speed` compresses durations
        inside the simulated hardware, never the clock: see the module's docstring).

        Nothing waits for the slowest lane. Under `step`, a 5 s pass on one lane held every
        agent of the fleet for 5 s, and heartbeats that fell due just after their lane had gone
        by were sent 5 s late (p99 gaps of 15.3-15.6 s at a 10 s interval). Returns the lanes'
        futures; a lane that dies raises from its future's `result()`."""
        origin, origin_wall = time.monotonic(), datetime.now(UTC)
        return [
            self.pool.submit(self._run_lane, index, stop, tick, origin, origin_wall) for index in range(self.workers)
        ]

    def take_longest_pass(self) -> float:
        """The longest lane pass (wall seconds) since the last call: what `run` adds to a lag."""
        with self._pass_lock:
            longest, self._longest_pass = self._longest_pass, 0.0
        return longest

    def _reachable(self, members: tuple[tuple[str, Agent], ...]) -> list[tuple[str, Agent]]:
        # cut off by a failed leaf switch: nothing such an agent would send gets through
        return [
            (hostname, agent) for hostname, agent in members if self.leaf_of.get(hostname) not in self.failed_leaves
        ]

    def _run_lane(self, index: int, stop: threading.Event, tick: float, origin: float, origin_wall: datetime) -> None:
        while not stop.is_set():
            began = time.monotonic()
            for hostname, agent in self._reachable(self.lanes[index]):
                if stop.is_set():
                    return
                now = origin_wall + timedelta(seconds=time.monotonic() - origin)
                _tick_agent(hostname, agent, now)
            took = time.monotonic() - began
            with self._pass_lock:
                self._longest_pass = max(self._longest_pass, took)
            stop.wait(max(0.0, tick - took))


def _handoff_reader(node_id):
    path = str(handoff_path(node_id))
    return lambda: read_handoff(path)


def _tick_lane(lane: list[tuple[str, Agent]], now: datetime, started: float, own_phase: bool) -> None:
    for hostname, agent in lane:
        _tick_agent(hostname, agent, now + timedelta(seconds=time.monotonic() - started) if own_phase else now)


def _tick_agent(hostname: str, agent: Agent, now: datetime) -> None:
    try:
        agent.tick(now)
    except Exception:
        log.exception("agent %s: tick failed; continuing", hostname)
