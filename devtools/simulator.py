"""The fleet simulator: one simulated node agent per node, all in one process.

Every agent is the real `hangar_agent.Agent` on a simulated hardware backend, talking to the
control plane over the real HTTP endpoints through one shared connection pool. The
simulator only steps them (`tick`) on one thread, so 256 agents (the 2,048-GPU demo) fit on
one core at 1× speed. Faults come from the agent's simulated hardware at the rates and cause
mix of core/reference/reliability.csv; a scripted scenario ("xid 79 on gpu 3 at 30s") can be
given per node for tests and demos.
"""

import logging
import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import requests
from django.db import DatabaseError, close_old_connections
from requests.adapters import HTTPAdapter

from core.api.agent_tokens import mint_agent_token
from fleet.choices import Lifecycle
from fleet.models import Node
from hangar_agent.agent import Agent, simulated_agent

GONE = (Lifecycle.RETIRED, Lifecycle.DISPOSED)
log = logging.getLogger(__name__)


@dataclass
class FleetSimulator:
    url: str
    speed: float = 1.0
    seed: int = 1
    scenarios: dict[str, str] = field(default_factory=dict)  # hostname → scenario text
    hostnames: Iterable[str] | None = None  # limit to these nodes (tests)
    agents: dict[str, Agent] = field(default_factory=dict)
    leaf_of: dict[str, str] = field(default_factory=dict)  # hostname → "fabric-domain/leaf"
    failed_leaves: set[str] = field(default_factory=set)  # leaf switches the simulation has killed
    refresh_failures: int = 0
    counter_dir: str | None = None  # where each simulated node keeps its energy counters

    def __post_init__(self):
        if self.counter_dir:
            Path(self.counter_dir).mkdir(parents=True, exist_ok=True)
        self.rng = random.Random(self.seed)
        self.session = requests.Session()
        adapter = HTTPAdapter(pool_connections=4, pool_maxsize=32)
        self.session.mount("http://", adapter)
        self.session.mount("https://", adapter)

    def refresh(self, start: datetime) -> int:
        """Start agents for nodes that appeared; stop those of nodes that left. Returns the count.

        The simulator reads the node list straight from the database; when the database is
        away the agents it already runs keep running (and keep their queues) and the list
        is read again on the next refresh, so an outage never takes the fleet down with it."""
        nodes = (
            Node.objects.exclude(lifecycle__in=GONE)
            .select_related("node_type", "fabric_domain")
            .prefetch_related("drives")
        )
        if self.hostnames is not None:
            nodes = nodes.filter(hostname__in=list(self.hostnames))
        try:
            current = {n.hostname: n for n in nodes}
        except DatabaseError as exc:
            self.refresh_failures += 1
            log.warning("node list unavailable (%s); keeping %d running agents", exc, len(self.agents))
            close_old_connections()
            return len(self.agents)
        for hostname, node in current.items():
            if node.leaf_switch:
                domain = node.fabric_domain.name if node.fabric_domain else "-"
                self.leaf_of[hostname] = f"{domain}/{node.leaf_switch}"
        for hostname in set(self.agents) - set(current):
            del self.agents[hostname]
        for hostname, node in current.items():
            if hostname not in self.agents:
                self.agents[hostname] = simulated_agent(
                    url=self.url,
                    token=mint_agent_token(node.pk),
                    hostname=hostname,
                    session=self.session,
                    rng=self.rng,
                    start=start,
                    speed=self.speed,
                    generation=node.node_type.generation,
                    gpu_count=node.node_type.gpus_per_node,
                    sku=node.node_type.slug,
                    scenario=self.scenarios.get(hostname),
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
                )
        return len(self.agents)

    def fail_leaf(self, leaf: str) -> list[str]:
        """Kill a leaf switch ("fabric-domain/leaf"): every node behind it falls silent at once
        (the simulation stops stepping their agents until `restore_leaf`). Returns their hostnames."""
        self.failed_leaves.add(leaf)
        return sorted(h for h, name in self.leaf_of.items() if name == leaf and h in self.agents)

    def restore_leaf(self, leaf: str) -> None:
        self.failed_leaves.discard(leaf)

    def step(self, now: datetime) -> None:
        """One tick of every agent (each does only what is due). A failing tick is logged and
        the next agent goes on: one agent's error never stops the fleet."""
        for hostname, agent in self.agents.items():
            if self.leaf_of.get(hostname) in self.failed_leaves:
                continue  # cut off: nothing it would send gets through
            try:
                agent.tick(now)
            except Exception:
                log.exception("agent %s: tick failed; continuing", hostname)
