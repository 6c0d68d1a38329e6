"""The admin at scale (docs/admin.md): every changelist, search and change form of the fleet,
tenants and health admins issues the same number of queries at two fleet sizes, never runs
DISTINCT or an uncapped COUNT, and searches through the index; bulk node actions ask first,
naming the nodes, allocations and tenants, and run nothing until confirmed."""

import pytest
from django.contrib import admin
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from core.models import AuditEvent
from devtools.services.fleet_seed import seed_fleet
from fleet.models import GPU, Drive, Hall, Node, NodeEvent, Rack
from fleet.services.bmc_credentials import set_bmc
from health.services.incidents import open_operator_incident
from tenants.models import Allocation, AllocationNode
from tenants.services.tenants import create_tenant

pytestmark = pytest.mark.django_db

ADMINS = [
    "core.auditevent",
    "fleet.node",
    "fleet.nodeevent",
    "fleet.nodebmc",
    "fleet.rack",
    "fleet.hall",
    "fleet.site",
    "fleet.fabricdomain",
    "fleet.nodetype",
    "fleet.gpu",
    "fleet.drive",
    "fleet.sanitizationrecord",
    "fleet.nodeagentaction",
    "tenants.tenant",
    "tenants.allocation",
    "health.condition",
    "health.incident",
]


# tables that grow with the fleet: no DISTINCT over them and no uncapped COUNT
BIG_TABLES = (
    "fleet_node",
    "fleet_gpu",
    "fleet_drive",
    "fleet_nodeevent",
    "fleet_nodebmc",
    "core_auditevent",
    "tenants_allocation",
    "health_condition",
)


def _place(node, tenant, name="train-1"):
    allocation = Allocation.objects.create(
        tenant=tenant, name=name, instance_type=node.node_type, node_count=1, state="active"
    )
    AllocationNode.objects.create(allocation=allocation, node=node, started_at=timezone.now())
    Node.objects.filter(pk=node.pk).update(lifecycle="active")
    return allocation


def _pages(client) -> dict[str, tuple[int, list[str]]]:
    """Query count and SQL of each admin's changelist, search and change form."""
    node = Node.objects.order_by("hostname").first()
    samples = {
        "core.auditevent": AuditEvent.objects.order_by("at").first().pk,
        "fleet.node": node.pk,
        "fleet.nodeevent": node.events.first().pk,
        "fleet.nodebmc": node.bmc.pk,
        "fleet.rack": node.rack_id,
        "fleet.hall": node.rack.hall_id,
        "fleet.site": node.rack.hall.site_id,
        "fleet.fabricdomain": node.fabric_domain_id,
        "fleet.nodetype": node.node_type_id,
        "fleet.gpu": node.gpus.first().pk,
        "fleet.drive": node.drives.first().pk,
        "tenants.tenant": Allocation.objects.first().tenant_id,
        "tenants.allocation": Allocation.objects.first().pk,
        "health.incident": node.incidents.first().pk,
    }
    out = {}
    for label in ADMINS:
        app, model = label.split(".")
        urls = {
            "list": reverse(f"admin:{app}_{model}_changelist"),
            "search": reverse(f"admin:{app}_{model}_changelist") + f"?q={node.hostname[:6]}",
        }
        if label in samples:
            urls["form"] = reverse(f"admin:{app}_{model}_change", args=[samples[label]])
        for page, url in urls.items():
            with CaptureQueriesContext(connection) as queries:
                response = client.get(url)
            assert response.status_code == 200, (url, response.status_code)
            out[f"{label} {page}"] = (len(queries), [q["sql"] for q in queries.captured_queries])
    return out


@pytest.mark.slow  # scale: 1,088 GPUs
def test_admin_pages_have_a_fixed_query_count_and_no_full_count(admin_client):
    seed_fleet(gpus=64)
    tenant, _ = create_tenant(slug="acme", name="Acme", max_nodes=64, actor="test")
    first = Node.objects.order_by("hostname").first()
    set_bmc(node=first, redfish_url="https://10.9.0.1", username="root", password="pw", actor="test")
    _place(first, tenant)
    open_operator_incident(nodes=[first], title="xid 79", severity="fatal", actor="test")
    _pages(admin_client)  # session, permission and content-type caches warm
    small = _pages(admin_client)
    seed_fleet(gpus=1024, site_slug="dc2", seed=11)  # 17× the nodes, GPUs and drives
    for node in Node.objects.filter(rack__hall__site__slug="dc2").order_by("hostname")[:3]:
        _place(node, tenant, name=f"more-{node.hostname}")
    large = _pages(admin_client)
    grew = {page: (small[page][0], large[page][0]) for page in small if small[page][0] != large[page][0]}
    assert grew == {}, grew
    for page, (_count, sqls) in large.items():
        for sql in sqls:
            big = [t for t in BIG_TABLES if f'FROM "{t}"' in sql or f'JOIN "{t}"' in sql]
            if big:
                assert "DISTINCT" not in sql.upper(), (page, sql)
                if "COUNT(" in sql.upper():  # the capped paginator: COUNT over a LIMITed subquery
                    assert "LIMIT" in sql.upper(), (page, sql)


def test_node_search_goes_through_the_index(admin_client, small_fleet):
    node = Node.objects.order_by("hostname").first()
    gpu, drive = node.gpus.first(), node.drives.first()
    for term in (gpu.uuid, gpu.uuid[:12].lower(), drive.serial, node.hostname.upper(), node.serial, node.rack.name):
        with CaptureQueriesContext(connection) as queries:
            response = admin_client.get(reverse("admin:fleet_node_changelist"), {"q": term})
        hosts = [n.hostname for n in response.context["cl"].result_list]
        assert node.hostname in hosts, term
        for q in queries.captured_queries:  # no icontains scan, no DISTINCT over the nodes
            assert " LIKE " not in q["sql"].upper() or "fleet_node" not in q["sql"], q["sql"]
            assert "DISTINCT" not in q["sql"].upper() or 'FROM "fleet_node"' not in q["sql"], q["sql"]
    assert (
        list(
            admin_client.get(reverse("admin:fleet_node_changelist"), {"q": "nothing-like-it"}).context["cl"].result_list
        )
        == []
    )
    bad = admin_client.get(reverse("admin:fleet_node_changelist"), {"q": "x\x1b[1m"})
    assert bad.status_code == 200 and "control or unassigned" in bad.content.decode()
    assert admin_client.get(reverse("admin:fleet_node_changelist"), {"q": "x\x00"}).status_code == 400  # Django's own
    gpus = admin_client.get(reverse("admin:fleet_gpu_changelist"), {"q": node.hostname}).context["cl"].result_list
    assert sorted(g.index for g in gpus) == list(range(8))
    drives = admin_client.get(reverse("admin:fleet_drive_changelist"), {"q": drive.serial}).context["cl"].result_list
    assert [d.pk for d in drives] == [drive.pk]
    halls = admin_client.get(reverse("admin:fleet_rack_changelist"), {"q": node.rack.hall.name}).context["cl"]
    assert {r.hall_id for r in halls.result_list} == {node.rack.hall_id}
    assert Rack.objects.exists() and Hall.objects.exists() and GPU.objects.exists() and Drive.objects.exists()


def test_history_is_its_own_paginated_list_linked_from_the_node(admin_client, small_fleet):
    node = Node.objects.order_by("hostname").first()
    now = timezone.now()
    NodeEvent.objects.bulk_create(
        [
            NodeEvent(node=node, at=now + timezone.timedelta(seconds=i), actor="test", action=f"step-{i}")
            for i in range(150)
        ]
    )
    page = admin_client.get(reverse("admin:fleet_node_change", args=[node.pk]))
    history = reverse("admin:fleet_nodeevent_changelist") + f"?node={node.pk}"
    assert history in page.content.decode()
    first = admin_client.get(history)
    assert [e.action for e in first.context["cl"].result_list][:2] == ["step-149", "step-148"]
    assert len(first.context["cl"].result_list) == 100
    second = admin_client.get(history + "&p=2")
    assert len(second.context["cl"].result_list) == NodeEvent.objects.filter(node=node).count() - 100
    assert admin_client.get(reverse("admin:fleet_nodeevent_changelist") + "?node=not-an-id").status_code in (200, 302)


def test_bulk_drain_names_the_tenants_and_runs_only_after_confirming(admin_client, small_fleet):
    tenant, _ = create_tenant(slug="acme", name="Acme Research", max_nodes=64, actor="test")
    rack = Node.objects.order_by("hostname").first().rack
    nodes = list(Node.objects.filter(rack=rack).order_by("hostname"))
    _place(nodes[0], tenant, name="train-llm")
    selection = {"action": "drain_nodes", "_selected_action": [str(n.pk) for n in nodes]}
    url = reverse("admin:fleet_node_changelist")

    page = admin_client.post(url, selection)
    assert page.status_code == 200
    html = page.content.decode()
    assert "Nothing has run yet" in html and "Acme Research (acme)" in html and "train-llm" in html
    assert all(n.hostname in html for n in nodes)
    assert not Node.objects.filter(pk__in=[n.pk for n in nodes], cordoned=True).exists()
    assert not NodeEvent.objects.filter(action="drain").exists()

    done = admin_client.post(url, {**selection, "confirm": "yes", "reason": "rack r1 power work"})
    assert done.status_code == 302
    assert Node.objects.filter(pk__in=[n.pk for n in nodes], cordoned=True).count() == len(nodes)
    drained = Node.objects.get(pk=nodes[0].pk)
    assert drained.drain_requested_at is not None  # the tenant is moved off by the allocation loop
    assert NodeEvent.objects.filter(action="drain", reason="rack r1 power work").count() == len(nodes)


def test_a_viewer_posting_the_confirmation_directly_runs_nothing(small_fleet, django_user_model, client):
    from django.contrib.auth.models import Permission

    user = django_user_model.objects.create_user("viewer", password="pw-viewer-1", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename="view_node"))
    client.force_login(user)
    node = Node.objects.order_by("hostname").first()
    response = client.post(
        reverse("admin:fleet_node_changelist"),
        {"action": "drain_nodes", "_selected_action": [str(node.pk)], "confirm": "yes"},
        follow=True,
    )
    assert response.status_code in (200, 403)
    node.refresh_from_db()
    assert not node.cordoned and not NodeEvent.objects.filter(node=node, action="drain").exists()
    assert "drain_nodes" in admin.site._registry[Node].actions
