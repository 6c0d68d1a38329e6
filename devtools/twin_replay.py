"""The twin's detection, replayed through the real code in the twin's own database.

For each failure the event loop (devtools.twin) hands over, on the simulated clock
(core.clock.simulated):
1. the node's simulated hardware (the agent's `SimulatedHardware`) turns the cause into the
   signals a real node shows — XIDs, ECC and row-remap counters, NVLink and IB links, a node
   that goes dark — exactly as under `simulate_fleet`;
2. the real ingest services take the node's heartbeat and health report (called directly, no
   HTTP: `health.services.ingest.ingest_heartbeat` / `ingest_health_report`); a node that went
   dark sends nothing and the sweep runs after the lease's quarantine time instead;
3. the real health sweep (`run_health_sweep`) applies the health policy: conditions,
   roll-up, quarantine or drain, remediation requests;
4. the node's lifecycle afterwards says whether the policy pulled it.
Modelled around it: the rest of the fleet's quiet heartbeats (one UPDATE stamping every node
as heard from at the event's time), the loops' quiet passes between events (their loop clocks
are moved up to one interval before the event, or the sweep would take the hours between two
failures for a control-plane outage and re-arm every lease), and the repair — when the event loop is done with the
node, its conditions are cleared and it is put back `available`/`healthy` in one write, where
the live system would run the remediation, RMA and re-admission steps.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta

from django.db import transaction

from core import clock
from core.models import LoopClock
from fleet.choices import Health, Lifecycle
from fleet.models import Node
from hangar_agent.hardware.simulated import SimulatedHardware
from health.choices import ConditionStatus
from health.models import Condition
from health.policy import HEARTBEAT_LOST_AFTER, SWEEP_INTERVAL
from health.services.ingest import ingest_health_report, ingest_heartbeat
from health.services.sweep import run_health_sweep

IN_SERVICE = (Lifecycle.AVAILABLE, Lifecycle.ACTIVE)


class ReplayDetector:
    """`detector(index, cause, at) -> (pulled, how)` for devtools.twin.run_variant."""

    def __init__(self, *, seed: int, generation: str, gpus_per_node: int, start: datetime) -> None:
        self.node_ids = list(Node.objects.order_by("hostname").values_list("pk", flat=True))
        self.seed, self.generation, self.gpus = seed, generation, gpus_per_node
        self.clock = clock.SimulatedClock(start)
        self.replayed = 0
        self.outcomes: dict[str, int] = {}

    def reset(self, start: datetime) -> None:
        """Every node back in service (a new variant starts from the same fleet)."""
        self.clock = clock.SimulatedClock(start)
        Condition.objects.filter(status=ConditionStatus.ACTIVE).update(status=ConditionStatus.CLEARED)
        Node.objects.update(
            lifecycle=Lifecycle.AVAILABLE, health=Health.HEALTHY, state_deadline=None, last_heartbeat_at=start
        )

    def __call__(self, index: int, cause: str, at: datetime) -> tuple[bool, str]:
        node_id = self.node_ids[index % len(self.node_ids)]
        hardware = SimulatedHardware(
            rng=random.Random(f"{self.seed}:{index}:{at.timestamp()}"),
            start=at,
            generation=self.generation,
            gpu_count=self.gpus,
            random_faults=False,
        )
        hardware.advance(at, allocated=True)
        # an early failure after a swap is the new part failing: it shows as a GPU fault
        hardware.inject_cause("gpu" if cause == "infant" else cause, at=at)
        hardware.advance(at, allocated=True)
        dark = hardware.power_state() == "off"
        judged = at + HEARTBEAT_LOST_AFTER + timedelta(seconds=10) if dark else at
        with clock.simulated(self.clock):
            self.clock.advance_to(max(self.clock.now(), judged))
            now = self.clock.now()
            # the rest of the fleet was heard from, and the loops ran every interval in between
            # finding nothing (modelled); this node only speaks if it still can
            Node.objects.exclude(pk=node_id).update(last_heartbeat_at=now)
            LoopClock.objects.filter(last_run_at__lt=now - SWEEP_INTERVAL).update(last_run_at=now - SWEEP_INTERVAL)
            if dark:
                Node.objects.filter(pk=node_id).update(last_heartbeat_at=at)
            else:
                ingest_heartbeat(
                    node_id=node_id,
                    power_state="on",
                    gpus=hardware.gpus(),
                    now=now,
                    ib_ports=hardware.ib_ports(),
                    observed_at=now,
                )
                ingest_health_report(node_id=node_id, observed_at=now, checks=hardware.health_checks(), now=now)
            run_health_sweep(now=now)
        lifecycle = Node.objects.filter(pk=node_id).values_list("lifecycle", flat=True).get()
        self.replayed += 1
        self.outcomes[lifecycle] = self.outcomes.get(lifecycle, 0) + 1
        self._put_back(node_id, now)
        return lifecycle not in IN_SERVICE, f"health policy → {lifecycle}"

    @transaction.atomic
    def _put_back(self, node_id, now: datetime) -> None:
        """The modelled repair's end, at once (the event loop keeps the node out for its repair time)."""
        Condition.objects.filter(node_id=node_id, status=ConditionStatus.ACTIVE).update(status=ConditionStatus.CLEARED)
        Node.objects.filter(pk=node_id).update(
            lifecycle=Lifecycle.AVAILABLE, health=Health.HEALTHY, state_deadline=None, last_heartbeat_at=now
        )
