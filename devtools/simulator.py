"""The fleet simulator: one simulated node agent per node, all in one process.

Every agent is the real `hangar_agent.Agent` on a simulated hardware backend, talking to the
control plane over the real HTTP endpoints through one shared connection pool. The
simulator only steps them (`tick`) on one thread, so 256 agents (the 2,048-GPU demo) fit on
one core at 1× speed. Faults come from the agent's simulated hardware at the rates and cause
mix of core/reference/reliability.csv; a scripted scenario ("xid 79 on gpu 3 at 30s") can be
given per node for tests and demos.
"""
import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

import requests
from requests.adapters import HTTPAdapter

from core.api.agent_tokens import mint_agent_token
from fleet.choices import Lifecycle
from fleet.models import Node
from hangar_agent.agent import Agent, simulated_agent

GONE = (Lifecycle.RETIRED, Lifecycle.DISPOSED)


@dataclass
class FleetSimulator:
    url: str
    speed: float = 1.0
    seed: int = 1
    scenarios: dict[str, str] = field(default_factory=dict)  # hostname → scenario text
    hostnames: Iterable[str] | None = None  # limit to these nodes (tests)
    agents: dict[str, Agent] = field(default_factory=dict)

    def __post_init__(self):
        self.rng = random.Random(self.seed)
        self.session = requests.Session()
        adapter = HTTPAdapter(pool_connections=4, pool_maxsize=32)
        self.session.mount("http://", adapter)
        self.session.mount("https://", adapter)

    def refresh(self, start: datetime) -> int:
        """Start agents for nodes that appeared; stop those of nodes that left. Returns the count."""
        nodes = Node.objects.exclude(lifecycle__in=GONE).select_related("node_type")
        if self.hostnames is not None:
            nodes = nodes.filter(hostname__in=list(self.hostnames))
        current = {n.hostname: n for n in nodes}
        for hostname in set(self.agents) - set(current):
            del self.agents[hostname]
        for hostname, node in current.items():
            if hostname not in self.agents:
                self.agents[hostname] = simulated_agent(
                    url=self.url, token=mint_agent_token(node.pk), hostname=hostname, session=self.session,
                    rng=self.rng, start=start, speed=self.speed, generation=node.node_type.generation,
                    gpu_count=node.node_type.gpus_per_node, sku=node.node_type.slug,
                    scenario=self.scenarios.get(hostname),
                )
        return len(self.agents)

    def step(self, now: datetime) -> None:
        """One tick of every agent (each does only what is due)."""
        for agent in self.agents.values():
            agent.tick(now)
