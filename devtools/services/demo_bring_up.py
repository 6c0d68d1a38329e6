"""The demo's newly enrolled node: one node of a new rack, enrolled without its InfiniBand
stack, put on the bring-up ladder. It climbs firmware, kernel, driver and fabric manager (an
H100 HGX's fabric manager does not need the IB stack) and is held at the network step with the
reason; after three failed checks the loop sets it `bring_up_failed` with that reason. The
simulator leaves the same layer out of this node's stack (`--missing-software`, devtools.demo),
so the agent's reports keep saying so."""

import random
import zlib

from django.db import transaction
from django.utils import timezone

from devtools.demo import DEMO_NEW_NODE, DEMO_NEW_NODE_MISSING
from fleet.choices import Health, Lifecycle, PowerState
from fleet.models import Node, Rack
from fleet.services.bring_up import advance_bring_up
from fleet.services.operator_actions import perform_operator_action
from fleet.services.software_inventory import Component, store_software_inventory
from hangar_agent.software import DRIVERS, SimulatedStack

ACTOR = "system:demo"


def seed_demo_bring_up(stdout) -> None:
    if Node.objects.filter(hostname=DEMO_NEW_NODE).exists():
        stdout.write(f"  bring-up: {DEMO_NEW_NODE} already enrolled")
        return
    node = _enrol()
    if node is None:
        stdout.write("  bring-up: no empty rack or no node type with a known stack; no new node")
        return
    advance_bring_up(now=timezone.now())  # its first check at once: the hold shows before the loop runs
    node.refresh_from_db()
    stdout.write(f"  bring-up: {node.hostname} enrolled without {DEMO_NEW_NODE_MISSING}, at {node.bring_up.step}")


@transaction.atomic
def _enrol() -> Node | None:
    template = Node.objects.select_related("node_type").order_by("hostname").last()
    rack = Rack.objects.filter(nodes__isnull=True).order_by("name").first()
    if template is None or rack is None or template.node_type.generation not in DRIVERS:
        return None
    node = Node.objects.create(
        hostname=DEMO_NEW_NODE,
        serial=f"SN-NEW-{zlib.crc32(DEMO_NEW_NODE.encode()):08X}",
        rack=rack,
        u_position=2,
        node_type=template.node_type,
        lifecycle=Lifecycle.ENROLLED,
        power_state=PowerState.ON,
        health=Health.UNKNOWN,
    )
    # What its agent reports (the simulator's stack of this node lacks the same layer).
    stack = SimulatedStack(
        random.Random(zlib.crc32(DEMO_NEW_NODE.encode())), node.node_type.generation, missing={DEMO_NEW_NODE_MISSING}
    )
    store_software_inventory(
        node=node, components=[Component(**c) for c in stack.components()], observed_at=timezone.now()
    )
    perform_operator_action(
        node_id=node.pk, action="start_bring_up", actor=ACTOR, reason="demo: a new rack's node, enrolled"
    )
    return node
