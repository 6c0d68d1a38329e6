"""The console search and the operator API search (docs/search.md): every identifier kind is
found, the index follows saves, renames, bulk writes and deletes, strangers and tenants are
refused, bad input is a 4xx or nothing, and the lookup's query count does not grow with the fleet."""

from datetime import date
from decimal import Decimal

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from core.models import SearchEntry
from core.services.tokens import create_api_token
from devtools.services.fleet_seed import seed_fleet
from fleet.models import GPU, Drive, Hall, Node, Rack
from health.services.incidents import open_operator_incident
from tenants.models import Allocation
from tenants.services.tenants import create_tenant

pytestmark = pytest.mark.django_db


def _api_search(ops_api, q):
    response = ops_api.get("/api/v1/ops/search", {"q": q})
    assert response.status_code == 200, response.content
    return response.json()["results"]


@pytest.fixture
def fleet(small_fleet):
    node = Node.objects.order_by("hostname").first()
    node.asset_tag = "ACME-0042"
    node.save()
    node.bmc.mac = "3c:ec:ef:aa:bb:cc"
    node.bmc.save()
    return node


def test_every_identifier_kind_is_found(fleet, ops_api, django_capture_on_commit_callbacks):
    from billing.models import Invoice, InvoiceStatus

    node = fleet
    gpu = node.gpus.order_by("index").first()
    drive = node.drives.first()
    tenant, _ = create_tenant(slug="acme-ai", name="Acme Artificial", max_nodes=8, actor="test")
    allocation = Allocation.objects.create(tenant=tenant, name="train-1", instance_type=node.node_type, node_count=1)
    incident = open_operator_incident(nodes=[node], title="xid 79", severity="fatal", actor="test")
    with django_capture_on_commit_callbacks(using="ledger", execute=True):
        invoice = Invoice.objects.using("ledger").create(
            tenant_id=tenant.pk,
            period=date(2026, 10, 1),
            number="HANGAR-000042",
            status=InvoiceStatus.FINALIZED,
            total=Decimal("12.50"),
        )
    expected = {
        "hostname": (node.hostname, node.pk),
        "node_serial": (node.serial, node.pk),
        "asset_tag": ("acme-0042", node.pk),
        "bmc_address": (node.bmc.address, node.bmc.pk),  # the BMC record, which opens its node
        "bmc_mac": ("3C-EC-EF-AA-BB-CC", node.bmc.pk),  # as printed on a label: dashes, capitals
        "gpu_uuid": (gpu.uuid.upper(), gpu.pk),
        "gpu_serial": (gpu.serial, gpu.pk),
        "drive_serial": (drive.serial, drive.pk),
        "rack_name": (node.rack.name, node.rack_id),
        "hall_name": (node.rack.hall.name, node.rack.hall_id),
        "tenant_slug": ("acme-ai", tenant.pk),
        "tenant_name": ("acme artificial", tenant.pk),
        "allocation_id": (str(allocation.pk), allocation.pk),
        "incident_id": (str(incident.pk), incident.pk),
        "invoice_number": ("hangar-000042", invoice.pk),
    }
    for kind, (q, object_id) in expected.items():
        hits = [h for h in _api_search(ops_api, q) if h["kind"] == kind]
        assert [(h["id"], h["match"]) for h in hits] == [(str(object_id), "exact")], kind
    gpu_hit = next(h for h in _api_search(ops_api, gpu.uuid) if h["kind"] == "gpu_uuid")
    assert gpu_hit["url"] == f"/fleet/nodes/{node.pk}/"  # a GPU opens its node


def test_console_opens_a_single_exact_match_and_groups_the_rest(fleet, operator_client):
    gpu = fleet.gpus.first()
    response = operator_client.get("/search/", {"q": gpu.uuid})
    assert response.status_code == 302 and response["Location"] == f"/fleet/nodes/{fleet.pk}/"
    page = operator_client.get("/search/", {"q": fleet.hostname[:-1]})  # a prefix of eight hostnames
    assert page.status_code == 200
    html = page.content.decode()
    assert "Hostname" in html and fleet.hostname in html and "Available" in html and "no tenant" in html
    assert 'id="search-box"' in html  # the header box is on the page, focused with "/"


def test_prefix_results_are_capped_at_fifty_with_a_more_link(fleet, operator_client, ops_api):
    hits = _api_search(ops_api, "gpu-")  # 64 GPU UUIDs
    assert len(hits) == 50 and {h["match"] for h in hits} == {"prefix"}
    page = operator_client.get("/search/", {"q": "gpu-"})
    more = page.context["page"].more
    assert more
    rest = operator_client.get("/search/", {"q": "gpu-", "more": more}).context["page"]
    assert len(rest.results) == 14 and rest.more is None
    seen = {r.id for r in page.context["page"].results} | {r.id for r in rest.results}
    assert len(seen) == 64
    bad = operator_client.get("/search/", {"q": "other", "more": more})
    assert bad.status_code == 400 and "another search" in bad.content.decode()


def test_exact_matches_rank_before_prefix_matches(small_fleet, ops_api):
    halls = list(Hall.objects.order_by("name"))
    hits = _api_search(ops_api, halls[0].name)  # "hall-1": the hall itself and its racks "hall-1-r0001"…
    assert hits[0]["kind"] == "hall_name" and hits[0]["match"] == "exact"
    assert all(h["match"] == "prefix" for h in hits[1:]) and any(h["kind"] == "rack_name" for h in hits)


def test_the_index_follows_a_rename_a_cleared_field_and_a_delete(fleet, ops_api, operator_client):
    old = fleet.hostname
    fleet.hostname = "renamed-node-01"
    fleet.save()
    assert _api_search(ops_api, old) == [] or all(
        h["id"] != str(fleet.pk) or h["kind"] != "hostname" for h in _api_search(ops_api, old)
    )
    assert [h["id"] for h in _api_search(ops_api, "RENAMED-node")] == [str(fleet.pk)]
    fleet.asset_tag = ""
    fleet.save()
    assert _api_search(ops_api, "acme-0042") == []
    gpu_uuid = fleet.gpus.first().uuid
    Node.objects.get(pk=fleet.pk).allocation_memberships.all().delete()
    fleet.events.all().delete()
    Node.objects.filter(pk=fleet.pk).delete()  # cascades to its GPUs and drives
    assert _api_search(ops_api, gpu_uuid) == [] and _api_search(ops_api, "renamed-node") == []
    assert not SearchEntry.objects.filter(object_id=str(fleet.pk)).exists()


def test_a_heartbeat_style_save_does_not_touch_the_index(fleet):
    with CaptureQueriesContext(connection) as queries:
        fleet.save(update_fields=["last_heartbeat_at"])
    assert not any("core_searchentry" in q["sql"] for q in queries.captured_queries)


def test_tenants_and_strangers_never_reach_search(fleet, client, django_user_model):
    tenant, _ = create_tenant(slug="globex", name="Globex", max_nodes=8, actor="test")
    _, plain = create_api_token(kind="tenant", tenant=tenant, role="admin", actor="test")
    from rest_framework.test import APIClient

    tenant_api = APIClient()
    tenant_api.credentials(HTTP_AUTHORIZATION=f"Bearer {plain}")
    refused = tenant_api.get("/api/v1/ops/search", {"q": fleet.hostname})
    assert refused.status_code == 403 and refused["Content-Type"].startswith("application/problem+json")
    assert APIClient().get("/api/v1/ops/search", {"q": fleet.hostname}).status_code == 401
    assert client.get("/search/", {"q": fleet.hostname}).status_code == 302  # to sign-in
    tenant_user = django_user_model.objects.create_user("tenant-user", password="pw-tenant-user")
    client.force_login(tenant_user)
    page = client.get("/search/", {"q": fleet.hostname})
    assert page.status_code == 403 and fleet.hostname not in page.content.decode()


@pytest.mark.parametrize(
    ("q", "status"),
    [
        ("", 200),
        ("   ", 200),
        ("x" * 10_000, 400),
        ("gpu\x00-", 400),
        ("%", 200),
        ("_", 200),
        ("gpu-%", 200),
        ("h_ll", 200),
        ("ＧＰＵ-", 200),  # full-width: NFKC makes it "gpu-"
        ("🚀", 200),
        ("\x1b[31m", 400),
        ("\U0010ffff", 400),
    ],
)
def test_bad_input_is_empty_or_a_clear_400(fleet, ops_api, operator_client, q, status):
    response = ops_api.get("/api/v1/ops/search", {"q": q})
    assert response.status_code == status
    if status == 400:
        assert response["Content-Type"].startswith("application/problem+json") and response.json()["detail"]
    elif q in ("%", "_", "gpu-%", "h_ll", "🚀", "", "   "):
        assert response.json()["results"] == []  # % and _ are literal: nothing carries them
    page = operator_client.get("/search/", {"q": q})
    assert page.status_code == status


def test_full_width_query_is_normalised(fleet, ops_api):
    assert len(_api_search(ops_api, "ＧＰＵ-")) == 50


def test_lookup_query_count_does_not_grow_with_the_fleet(ops_api, django_assert_max_num_queries):
    from core.search import MODELS

    seed_fleet(gpus=64)
    tenant, _ = create_tenant(slug="gpu-tenant", name="GPU tenant", max_nodes=8, actor="test")
    _api_search(ops_api, "warm-up")  # the token's first use is recorded once
    counts = []
    for size in (64, 512):
        if size == 512:
            seed_fleet(gpus=512, site_slug="second", seed=8)
        with CaptureQueriesContext(connection) as queries:
            hits = _api_search(ops_api, "gpu")  # GPU UUIDs and the tenant
        counts.append(len(queries.captured_queries))
        assert len(hits) == 50
    assert counts[0] == counts[1]
    with django_assert_max_num_queries(2 + 2 + len(MODELS)):  # auth + the index + one per model (+ tenants of invoices)
        _api_search(ops_api, "a")


def test_rebuild_command_rewrites_the_index(fleet, ops_api, capsys):
    SearchEntry.objects.all().delete()
    GPU.objects.filter(node=fleet).update(serial="REBUILT-1")  # a write that bypassed signals
    assert _api_search(ops_api, fleet.hostname) == []
    call_command("rebuild_search_index")
    out = capsys.readouterr().out
    assert "hostname: 8" in out and "gpu_uuid: 64" in out
    assert _api_search(ops_api, fleet.hostname)[0]["id"] == str(fleet.pk)
    assert len([h for h in _api_search(ops_api, "rebuilt-1") if h["kind"] == "gpu_serial"]) == 8
    call_command("rebuild_search_index", "fleet.Rack")
    with pytest.raises(Exception, match="not searchable"):
        call_command("rebuild_search_index", "fleet.NodeType")
    assert Rack.objects.count() and Drive.objects.count()
