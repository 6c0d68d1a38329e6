"""Which nodes a placement takes, now chosen by one ranked SQL statement per domain: the
tightest leaf that holds the whole allocation on healthy nodes; else the fullest leaves, every
healthy node before a degraded one; never a cordoned or unplaceable node."""

import pytest

from fleet.choices import Health
from fleet.models import Node
from tenants.models import Allocation
from tenants.services.allocation_loop import run_allocation_loop

pytestmark = pytest.mark.django_db


@pytest.fixture
def leaves(small_fleet):
    """The 8 nodes of the one H100 domain, re-cabled: leaf a 3 healthy, leaf b 2 healthy,
    leaf c 1 healthy + 1 degraded, one node cordoned and one unhealthy (both on leaf d)."""
    nodes = list(Node.objects.filter(node_type__slug="h100-sxm-8x").order_by("id"))
    assert len(nodes) == 8 and len({n.fabric_domain_id for n in nodes}) == 1
    layout = [
        ("a", Health.HEALTHY, False),
        ("a", Health.HEALTHY, False),
        ("a", Health.HEALTHY, False),
        ("b", Health.HEALTHY, False),
        ("b", Health.HEALTHY, False),
        ("c", Health.DEGRADED, False),
        ("c", Health.HEALTHY, False),
        ("d", Health.HEALTHY, True),
    ]
    for node, (leaf, health, cordoned) in zip(nodes, layout, strict=True):
        Node.objects.filter(pk=node.pk).update(leaf_switch=leaf, health=health, cordoned=cordoned)
    return {leaf: [n.pk for n, (lf, _, _) in zip(nodes, layout, strict=True) if lf == leaf] for leaf in "abcd"}


def _place(client, count: int, key: str) -> set:
    response = client.post(
        "/api/v1/allocations",
        {"name": key, "instance_type": "h100-sxm-8x", "node_count": count, "fabric": "none"},
        format="json",
        HTTP_IDEMPOTENCY_KEY=key,
    )
    assert response.status_code == 202, response.content
    run_allocation_loop()
    return set(Allocation.objects.get(pk=response.data["id"]).memberships.values_list("node_id", flat=True))


def test_the_tightest_leaf_that_holds_them_all_wins(leaves, client_a):
    assert _place(client_a, 2, "two") == set(leaves["b"])  # b (2) fits more tightly than a (3)
    assert _place(client_a, 3, "three") == set(leaves["a"])


def test_without_a_fitting_leaf_the_fullest_leaves_fill_first_and_degraded_comes_last(leaves, client_a):
    placed = _place(client_a, 6, "six")
    healthy_c = leaves["c"][1]
    assert placed == set(leaves["a"]) | set(leaves["b"]) | {healthy_c}  # all six healthy, degraded left
    assert _place(client_a, 1, "last") == {leaves["c"][0]}  # then the degraded one; never the cordoned


def test_spreading_takes_the_fullest_leaf_then_the_next(leaves, client_a):
    assert _place(client_a, 4, "four") == set(leaves["a"]) | {min(leaves["b"])}
