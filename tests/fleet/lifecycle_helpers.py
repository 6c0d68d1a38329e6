"""Shared setup for lifecycle tests: put nodes in a state, give one a live allocation."""
from datetime import timedelta

from django.utils import timezone

from fleet.models import Node
from fleet.services.lifecycle import STATE_TIMEOUTS


def place(node: Node, state: str, *, entered_ago: timedelta = timedelta(0), **fields) -> Node:
    """Test setup only: place the node in `state` as if it entered it `entered_ago`."""
    timeout = STATE_TIMEOUTS.get(state)
    deadline = timezone.now() - entered_ago + timeout if timeout else None
    Node.objects.filter(pk=node.pk).update(lifecycle=state, state_deadline=deadline, **fields)
    node.refresh_from_db()
    return node


def allocate(node: Node):
    from tenants.models import Allocation, AllocationNode, Tenant

    tenant, _ = Tenant.objects.get_or_create(slug="acme", defaults={"name": "Acme"})
    allocation = Allocation.objects.create(tenant=tenant, name="job", instance_type=node.node_type, node_count=1,
                                           state="active")
    return AllocationNode.objects.create(allocation=allocation, node=node, started_at=timezone.now())
