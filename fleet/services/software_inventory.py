"""Storing what a node reports about its software and firmware stack.

One report is one source's whole view of the node (the agent's: what it reads on the host),
so storing it replaces that source's rows: a component the report no longer lists is gone
from the node. Reports arrive out of order after an agent's outage (its spool replays them),
so a report older than what is stored changes nothing. Other sources (the BMC layer's
Redfish firmware inventory) call the same function with their own `source`.
"""

from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from fleet.choices import InventorySource
from fleet.models import Node, NodeSoftware

# How many components one report may carry (the agent sends ~12; a BMC's firmware inventory
# of GPUs, NVSwitches, NICs, PSUs and drives stays well under this).
MAX_COMPONENTS = 64


@dataclass(frozen=True)
class Component:
    component: str
    version: str
    state: str
    detail: str = ""


@dataclass(frozen=True)
class Stored:
    stored: int
    stale: bool  # an older report than the one already stored: nothing changed


@transaction.atomic
def store_software_inventory(
    *, node: Node, components: list[Component], observed_at: datetime, source: str = InventorySource.AGENT
) -> Stored:
    """Replace `source`'s view of the node's stack with `components` (validated by the caller)."""
    if len(components) > MAX_COMPONENTS:
        raise ValueError(f"at most {MAX_COMPONENTS} components per report")
    # Lock the node's row: two concurrent reports of one node settle in order.
    Node.objects.select_for_update().filter(pk=node.pk).values_list("pk", flat=True).first()
    rows = NodeSoftware.objects.filter(node=node, source=source)
    latest = max((r.observed_at for r in rows.only("observed_at")), default=None)
    if latest is not None and observed_at < latest:
        return Stored(0, stale=True)
    now = timezone.now()
    rows.exclude(component__in=[c.component for c in components]).delete()
    NodeSoftware.objects.bulk_create(
        [
            NodeSoftware(
                node=node,
                source=source,
                component=c.component,
                version=c.version,
                state=c.state,
                detail=c.detail,
                observed_at=observed_at,
                received_at=now,
            )
            for c in components
        ],
        update_conflicts=True,
        unique_fields=["node", "source", "component"],
        update_fields=["version", "state", "detail", "observed_at", "received_at"],
    )
    return Stored(len(components), stale=False)
