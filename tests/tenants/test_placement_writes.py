"""What one placement writes, and in how many statements: the domain and its nodes chosen in
one locked statement (with the tenant's partition), then one INSERT of memberships, one
compare-and-set UPDATE … RETURNING of the nodes, one INSERT of node events, one INSERT of
agent actions and the allocation's UPDATE. The domain choice falls back to counting every
domain only when the chosen one cannot be taken."""

import pytest
from django.db import connection

from fleet.choices import AgentAction, AgentActionState, Lifecycle
from fleet.models import FabricDomain, Node, NodeAgentAction, NodeEvent, NodeType
from fleet.services.agent_work import request_agent_actions
from tenants.choices import FabricMode
from tenants.models import Allocation, AllocationNode
from tenants.services.partitions import partition_for_allocation
from tenants.services.placement import _claim_statement, place_allocation

pytestmark = pytest.mark.django_db


def _h100_nodes() -> list[Node]:
    return list(Node.objects.filter(node_type__slug="h100-sxm-8x").order_by("hostname"))


def _allocation(tenant, count: int, name: str, fabric=FabricMode.ISOLATED) -> Allocation:
    node_type = NodeType.objects.get(slug="h100-sxm-8x")
    return Allocation.objects.create(tenant=tenant, name=name, instance_type=node_type, node_count=count, fabric=fabric)


def _second_domain(nodes: list[Node]) -> FabricDomain:
    """Move `nodes` to a new fabric domain (test setup: re-cabling)."""
    first = FabricDomain.objects.get(pk=nodes[0].fabric_domain_id)
    domain = FabricDomain.objects.create(
        site=first.site, name="second", technology=first.technology, generation=first.generation
    )
    Node.objects.filter(pk__in=[n.pk for n in nodes]).update(fabric_domain=domain)
    return domain


def test_a_placement_is_a_fixed_number_of_statements(small_fleet, tenant_a, django_assert_num_queries):
    domain_id = _h100_nodes()[0].fabric_domain_id
    partition = partition_for_allocation(tenant=tenant_a, fabric_domain_id=domain_id, actor="test")
    for name in ("first", "second"):  # the second reuses the statement built for the first
        allocation = _allocation(tenant_a, 4, name)
        # the domain its volumes' export partition requires (none here); savepoint, the locked
        # choice (with the partition), memberships, node compare-and-set, node events, agent
        # actions, the allocation, release; and the access the agents get (the tenant's keys,
        # the volumes, the revision stored): per placement, not per node.
        with django_assert_num_queries(12):
            placed = place_allocation(allocation, actor="test")
        ids = {n.pk for n in placed}
        assert len(ids) == 4 and all(n.lifecycle == Lifecycle.PROVISIONING for n in placed)
        allocation.refresh_from_db()
        assert allocation.fabric_domain_id == domain_id and allocation.fabric_partition_id == partition.pk
        members = AllocationNode.objects.filter(allocation=allocation)
        assert {m.node_id for m in members} == ids
        assert {m.fabric_partition_id for m in members} == {partition.pk}
        assert set(Node.objects.filter(pk__in=ids).values_list("lifecycle", flat=True)) == {Lifecycle.PROVISIONING}
        events = NodeEvent.objects.filter(node_id__in=ids, action="provision")
        assert events.count() == 4
        assert {(e.from_state, e.to_state, e.actor) for e in events} == {
            (Lifecycle.AVAILABLE, Lifecycle.PROVISIONING, "test")
        }
        actions = NodeAgentAction.objects.filter(node_id__in=ids, action=AgentAction.PROVISION)
        assert actions.count() == 4
        assert {a.params["partition_key"] for a in actions} == {partition.partition_key}
        assert {a.params["allocation_id"] for a in actions} == {str(allocation.pk)}


def test_the_first_isolated_allocation_in_a_domain_creates_the_partition(small_fleet, tenant_a):
    allocation = _allocation(tenant_a, 2, "first")
    place_allocation(allocation, actor="test")
    allocation.refresh_from_db()
    assert allocation.fabric_partition is not None
    assert allocation.fabric_partition.tenant_id == tenant_a.pk
    assert set(allocation.memberships.values_list("fabric_partition_id", flat=True)) == {allocation.fabric_partition_id}


def test_the_tightest_domain_that_fits_is_chosen(small_fleet, tenant_a):
    nodes = _h100_nodes()
    second = _second_domain(nodes[:3])  # 3 nodes there, 5 in the first domain
    three = _allocation(tenant_a, 3, "three", fabric=FabricMode.NONE)
    assert {n.fabric_domain_id for n in place_allocation(three)} == {second.pk}
    four = _allocation(tenant_a, 4, "four", fabric=FabricMode.NONE)
    assert {n.fabric_domain_id for n in place_allocation(four)} == {nodes[3].fabric_domain_id}


def test_when_the_chosen_domain_cannot_be_taken_the_next_that_fits_is(small_fleet, tenant_a):
    nodes = _h100_nodes()
    _second_domain(nodes[:3])
    # An available node still in a live allocation (what the partial unique index exists for):
    # the tightest domain's claim fails on it, and the domains are counted and tried in turn.
    stale = _allocation(tenant_a, 1, "stale", fabric=FabricMode.NONE)
    AllocationNode.objects.create(allocation=stale, node=nodes[0], started_at=stale.created_at)
    allocation = _allocation(tenant_a, 3, "three", fabric=FabricMode.NONE)
    placed = place_allocation(allocation)
    assert {n.fabric_domain_id for n in placed} == {nodes[3].fabric_domain_id}
    assert AllocationNode.objects.filter(allocation=allocation).count() == 3
    assert Node.objects.get(pk=nodes[0].pk).lifecycle == Lifecycle.AVAILABLE  # the failed try left nothing


def test_requesting_agent_actions_counts_only_what_it_queued(small_fleet):
    nodes = _h100_nodes()[:3]
    assert request_agent_actions(nodes=nodes[:2], action=AgentAction.PROVISION, actor="test") == 2
    # One already pending: the database's one-pending-per-kind constraint skips it.
    assert request_agent_actions(nodes=nodes, action=AgentAction.PROVISION, actor="test") == 1
    pending = NodeAgentAction.objects.filter(action=AgentAction.PROVISION, state=AgentActionState.PENDING)
    assert sorted(pending.values_list("node_id", flat=True)) == sorted(n.pk for n in nodes)


def test_the_free_counts_need_no_visit_to_the_nodes_table(small_fleet, tenant_a, is_postgres):
    """Choosing the domain counts every free node of the type (~20,000 at 125,000 nodes, 80 %
    used), and ranking reads a domain's: the free-nodes index holds every column both read, so
    on PostgreSQL neither visits the table (an index-only scan); only the chosen rows, and the
    few free nodes found from unwiped memberships, are fetched."""
    if not is_postgres:
        pytest.skip("a PostgreSQL plan")
    node_type = NodeType.objects.get(slug="h100-sxm-8x")
    sql, head, tail = _claim_statement(node_type, 4, None, False)
    with connection.cursor() as cursor:
        # Eight nodes: left alone the planner would rightly read the table; make it take an index.
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_bitmapscan = off")
        cursor.execute(f"EXPLAIN {sql}", (*head, tenant_a.pk, *tail))
        plan = "\n".join(row[0] for row in cursor.fetchall())
    node_scans = [line.strip() for line in plan.splitlines() if " on fleet_node " in line]
    # The free count, the unwiped ones among them (looked up from their memberships), the
    # ranking, the fetch of the chosen rows to lock.
    assert len(node_scans) == 4, plan
    # The count and the ranking at least (on eight nodes the unwiped lookup may be one too).
    assert sum("Index Only Scan using fleet_node_free_by_type_idx" in line for line in node_scans) >= 2, plan


def _left_unwiped(tenant, node: Node, times: int = 1) -> None:
    """`node` left a tenant `times` over and was never seen wiped (what the count must leave out)."""
    for i in range(times):
        gone = _allocation(tenant, 1, f"gone-{node.hostname}-{i}", fabric=FabricMode.NONE)
        AllocationNode.objects.create(allocation=gone, node=node, started_at=gone.created_at, ended_at=gone.created_at)


def test_an_unwiped_node_is_not_counted_as_free_by_the_domain_choice(small_fleet, tenant_a, django_assert_num_queries):
    nodes = _h100_nodes()
    second = _second_domain(nodes[:5])  # 5 there, 3 in the first domain
    _left_unwiped(tenant_a, nodes[5])  # the first domain holds only 2 placeable now
    allocation = _allocation(tenant_a, 3, "three", fabric=FabricMode.NONE)
    # Counted right, the one statement chooses the second domain: no failed try, no fallback.
    with django_assert_num_queries(11):  # 8, and the access spec (keys, volumes, revision)
        placed = place_allocation(allocation)
    assert {n.fabric_domain_id for n in placed} == {second.pk}
    assert nodes[5].pk not in {n.pk for n in placed}


def test_a_node_that_left_unwiped_twice_is_subtracted_once(small_fleet, tenant_a, django_assert_num_queries):
    nodes = _h100_nodes()
    second = _second_domain(nodes[:5])
    _left_unwiped(tenant_a, nodes[0], times=2)  # the second domain holds 4 placeable, not 3
    allocation = _allocation(tenant_a, 4, "four", fabric=FabricMode.NONE)
    with django_assert_num_queries(11):
        placed = place_allocation(allocation)
    assert {n.pk for n in placed} == {n.pk for n in nodes[1:5]}
    assert {n.fabric_domain_id for n in placed} == {second.pk}
