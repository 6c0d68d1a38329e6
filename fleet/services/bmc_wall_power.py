"""The power sync's chassis power reads: the BMC's wall reading for nodes whose agent has none.

A node's draw comes from its agent (a meter it relays, or its GPUs' board power). When the
agent is silent or reports neither — hung, powered off, at intake — the BMC's own chassis
power (Redfish `PowerControl[].PowerConsumedWatts`) is recorded as the node's wall reading,
source `bmc`, at the time it was read, so the power page, rack and hall figures and /metrics
show a measurement instead of the rated maximum. Bounded: at most BMC_POWER_READS_PER_PASS
nodes a pass, least recently read first, reachable BMCs only. An agent reading always wins: a
node whose agent reported within POWER_READING_FRESH (the selectors' rule) is not read, and
the write is conditional, so a heartbeat that lands during the read is not overwritten.
"""

import logging
from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q

from fleet.choices import BMCErrorKind, WallPowerSource
from fleet.models import Node, NodeBMC
from fleet.selectors.power import POWER_READING_FRESH

from . import bmc as redfish
from .bmc_credentials import CredentialsUnreadable, target_for

log = logging.getLogger(__name__)


def agent_reading_fresh(now: datetime, prefix: str = "") -> Q:
    """The agent reported the node's wall or GPU power within POWER_READING_FRESH. A wall
    reading stamped with the BMC record's own `power_read_at` is the sync's, not the agent's."""
    fresh_after = now - POWER_READING_FRESH
    read_at = f"{prefix}bmc__power_read_at"
    agent_wall = Q(**{f"{prefix}wall_power_w__isnull": False, f"{prefix}wall_power_at__gte": fresh_after}) & (
        Q(**{f"{read_at}__isnull": True}) | ~Q(**{f"{prefix}wall_power_at": F(read_at)})
    )
    agent_gpu = Q(**{f"{prefix}gpu_power_w__isnull": False, f"{prefix}last_heartbeat_at__gte": fresh_after})
    return agent_wall | agent_gpu


def _candidates(now: datetime, limit: int) -> list[NodeBMC]:
    return list(
        NodeBMC.objects.exclude(username_encrypted="")
        .filter(reachable=True)
        .exclude(agent_reading_fresh(now, "node__"))
        .select_related("node__node_type")
        .order_by(F("power_read_at").asc(nulls_first=True))[:limit]
    )


def _read(item) -> tuple:
    bmc, target = item
    try:
        return bmc, redfish.read_power_watts(target), None
    except redfish.BMCError as exc:
        return bmc, None, exc


def read_chassis_power(*, now: datetime, concurrency: int, pool_map, limit: int | None = None) -> dict:
    """One bounded round of chassis power reads; returns counts for the pass summary."""
    limit = settings.BMC_POWER_READS_PER_PASS if limit is None else limit
    counts = {"watts_read": 0, "watts_absent": 0, "watts_refused": 0, "watts_failed": 0}
    if limit <= 0:
        return counts
    items = []
    for bmc in _candidates(now, limit):
        try:
            items.append((bmc, target_for(bmc)))
        except CredentialsUnreadable:
            continue  # the state read already put that on the record
    results = pool_map(_read, items, concurrency)
    _write_readings(results, now, counts)
    return counts


@transaction.atomic
def _write_readings(results: list, now: datetime, counts: dict) -> None:
    """What the reads saw, in one short transaction of its own (the reads held none)."""
    for bmc, watts, error in results:
        if error is not None:
            # The state read owns reachability and the node's last_error; a chassis without a
            # Power resource (404) is as much a skip as one without a reading.
            key = "watts_absent" if error.kind == BMCErrorKind.NOT_SUPPORTED else "watts_failed"
            counts[key] += 1
            log.debug("no chassis power from %s: %s", bmc.redfish_url, error.detail)
            continue
        if watts is None:
            counts["watts_absent"] += 1
            continue
        node_kw = bmc.node.node_type.node_kw
        if watts > node_kw * 1000:
            # The agent path's rule (health.services.ingest): no reading above the rated maximum.
            counts["watts_refused"] += 1
            log.warning(
                "wall power reading refused on node %s: %s W from the BMC is above the type's %s kW maximum",
                bmc.node_id,
                watts,
                node_kw,
            )
            continue
        # Conditional: a heartbeat that arrived while the BMC answered keeps its reading.
        counts["watts_read"] += (
            Node.objects.filter(pk=bmc.node_id)
            .exclude(agent_reading_fresh(now))
            .update(wall_power_w=watts, wall_power_source=WallPowerSource.BMC, wall_power_at=now)
        )
    # Stamped after the node writes (whose condition compares with the previous stamp): from now
    # on a wall_power_at equal to it marks the reading as the sync's own, and the BMCs just
    # read go to the back of the queue.
    NodeBMC.objects.filter(pk__in=[bmc.pk for bmc, _, _ in results]).update(power_read_at=now)
