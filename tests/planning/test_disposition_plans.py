"""Disposition plans through the ops API and the console: the split covers every selected node,
redeploy is served first, and the pages' query counts do not grow with the plan."""

import uuid
from datetime import UTC
from decimal import Decimal

import pytest

from devtools.services.fleet_seed import seed_fleet
from fleet.models import Node
from planning.models import DispositionAssignment, DispositionPlan

pytestmark = pytest.mark.django_db

DEMANDS = [
    {"pool": "inference", "nodes_wanted": 8, "value_per_gpu_hour": "2.00", "utilisation": "0.80", "horizon_months": 24}
]


def body(**overrides):
    return {
        "name": "H100 refresh",
        "selection": {"gpu_model": "H100"},
        "demands": DEMANDS,
        "horizon_months": 24,
        "channel": "broker",
        **overrides,
    }


def create(ops_api, **overrides):
    return ops_api.post(
        "/api/v1/ops/disposition-plans", body(**overrides), format="json", HTTP_IDEMPOTENCY_KEY=str(uuid.uuid4())
    )


def test_plan_over_256_gpus_splits_every_node_redeploy_first(ops_api):
    seed_fleet(gpus=256)
    r = create(ops_api)
    assert r.status_code == 201, r.json()
    result = r.json()["result"]
    h100 = Node.objects.filter(node_type__gpu_model__icontains="H100").count()
    assert result["node_count"] == h100 == 32
    assert sum(result["split"].values()) == h100
    assert result["split"]["redeploy"] == 8
    assert result["allocations"][0]["option"] == "redeploy" and result["allocations"][0]["pool"] == "inference"
    assert result["reasoning"][0].startswith("Redeploy 8 nodes")
    assert result["currency"] == "USD" and "figures" not in result
    sources = {a["name"]: a["source"] for a in result["assumptions"]}
    assert "economics.csv" in sources["electricity_usd_per_kwh"]
    plan = DispositionPlan.objects.get(pk=r.json()["id"])
    assert DispositionAssignment.objects.filter(plan=plan).count() == h100
    assert DispositionAssignment.objects.filter(plan=plan, option="redeploy", pool="inference").count() == 8
    got = ops_api.get(f"/api/v1/ops/disposition-plans/{plan.pk}")
    assert got.status_code == 200 and got.json()["result"]["split"] == result["split"]


def test_overrides_are_applied_and_cited(ops_api, small_fleet):
    no_reason = create(ops_api, demands=[], assumption_overrides={"freed_power_value_per_kw_month": "0"})
    assert no_reason.status_code == 400 and no_reason.json()["errors"][0]["field"] == "override_reason"
    r = create(
        ops_api,
        demands=[],
        assumption_overrides={"freed_power_value_per_kw_month": "0"},
        override_reason="hall 1 has spare power",
    )
    assert r.status_code == 201
    result = r.json()["result"]
    assert result["freed_power_value_per_kw_month"] == "0.00"
    assert {a["name"]: a["source"] for a in result["assumptions"]}[
        "freed_power_value_per_kw_month"
    ] == "overridden in this plan (hall 1 has spare power); default 184"


def test_bad_plan_input_is_400_with_errors(ops_api, small_fleet):
    r = create(
        ops_api,
        horizon_months=0,
        channel="ebay",
        assumption_overrides={"pue": "-1", "magic": "2"},
        demands=[{"pool": "x"}],
    )
    assert r.status_code == 400
    fields = {e["field"] for e in r.json()["errors"]}
    assert {"horizon_months", "channel"} <= fields and any("nodes_wanted" in f for f in fields)
    assert any(f.startswith("assumption_overrides") for f in fields)
    nothing = create(ops_api, selection={"gpu_model": "Z999"})
    assert nothing.status_code == 400 and nothing.json()["errors"][0]["field"] == "selection"
    empty = create(ops_api, selection={})
    assert empty.status_code == 400
    assert not DispositionPlan.objects.exists()


def test_plan_creation_is_idempotent_and_unknown_plan_is_404(ops_api, small_fleet):
    k = str(uuid.uuid4())
    a = ops_api.post("/api/v1/ops/disposition-plans", body(), format="json", HTTP_IDEMPOTENCY_KEY=k)
    b = ops_api.post("/api/v1/ops/disposition-plans", body(), format="json", HTTP_IDEMPOTENCY_KEY=k)
    assert a.json()["id"] == b.json()["id"] and DispositionPlan.objects.count() == 1
    assert ops_api.get(f"/api/v1/ops/disposition-plans/{uuid.uuid4()}").status_code == 404
    assert ops_api.get("/api/v1/ops/disposition-plans/nope").status_code == 404


@pytest.mark.parametrize("gpus", [64, 512])
def test_plan_pages_have_a_fixed_query_count(operator_client, ops_api, django_assert_max_num_queries, gpus):
    seed_fleet(gpus=gpus)
    plan_id = create(ops_api).json()["id"]
    with django_assert_max_num_queries(8):
        listing = operator_client.get("/plans/disposition/")
    assert listing.status_code == 200 and b"H100 refresh" in listing.content
    with django_assert_max_num_queries(13):  # 13th: which tenant holds each listed node
        page = operator_client.get(f"/plans/disposition/{plan_id}/")
    assert page.status_code == 200
    html = page.content.decode()
    assert 'id="split-chart"' in html and "Redeploy 8 nodes" in html and "economics.csv" in html


def test_console_form_creates_a_plan_and_runs_sanitize(operator_client, small_fleet):
    r = operator_client.post(
        "/plans/disposition/",
        {
            "name": "console plan",
            "gpu_model": "H100",
            "horizon_months": "24",
            "channel": "broker",
            "pool_0": "inference",
            "nodes_0": "2",
            "value_0": "2.00",
            "util_0": "0.8",
            "months_0": "24",
        },
    )
    assert r.status_code == 302
    plan = DispositionPlan.objects.get(name="console plan")
    node = plan.assignments.order_by("node__hostname").first().node
    asked = operator_client.post(f"/plans/disposition/{plan.pk}/nodes/", {"action": "sanitize", "node": [node.pk]})
    assert "Sanitize 1 node?" in asked.content.decode() and "erases every drive" in asked.content.decode()
    refused = operator_client.post(
        f"/plans/disposition/{plan.pk}/nodes/",
        {"action": "sanitize", "node": [node.pk], "confirmed": "yes"},
        follow=True,
    )
    assert "allowed from: decommissioning" in refused.content.decode()
    bad = operator_client.post("/plans/disposition/", {"name": "", "horizon_months": "x"})
    assert bad.status_code == 200 and b"horizon_months" in bad.content


def _migration(ops_api, body):
    r = ops_api.post("/api/v1/ops/migration-plans", body, format="json", HTTP_IDEMPOTENCY_KEY=str(uuid.uuid4()))
    assert r.status_code == 201, r.json()
    plan_id = r.json()["id"]
    applied = ops_api.post(
        f"/api/v1/ops/migration-plans/{plan_id}/apply", None, format="json", HTTP_IDEMPOTENCY_KEY=str(uuid.uuid4())
    )
    assert applied.status_code == 200, applied.json()
    return plan_id


def test_linked_migration_values_freed_power_once_from_its_reuse_with_cash_apart(ops_api, monkeypatch):
    seed_fleet(gpus=2048)
    from datetime import datetime

    from django.utils import timezone

    monkeypatch.setattr(timezone, "now", lambda: datetime(2026, 7, 6, tzinfo=UTC))
    # Four NVL72 units against a 1,536-GPU floor: 16 racks land in hall-1's CDU positions, where the
    # drained H100s' power is freed; reuse is what they draw beyond the hall's spare power, from the
    # week the first of them lands there (the CDUs are ready 2027-07-06).
    plan_id = _migration(
        ops_api,
        {
            "start": "2026-07-06",
            "floor_unit": "gpus",
            "capacity_floor_gpus": 1536,
            "deliveries": [
                {"date": d, "scalable_units": 1, "racks_per_unit": 8}
                for d in ("2026-08-03", "2026-09-28", "2027-04-12", "2027-07-19")
            ],
        },
    )
    # No lease market: every node is sold, so every freed kW leaves (a leased node keeps its kW).
    r = create(ops_api, selection={"migration_plan_id": plan_id}, demands=[], lease_cap_nodes=0)
    assert r.status_code == 201, r.json()
    result = r.json()["result"]
    reuse = result["power_reuse"]
    assert result["node_count"] == 256
    assert reuse["first_reuse"] is not None and reuse["first_reuse"] > "2027-01-01"
    assert 0 < reuse["reused_kw_months"] <= reuse["freed_kw"] * 24
    assert result["split"]["resale"] == 256
    # Valued once: the plan's opportunity value is the reused kW-months at the colocation rate.
    expected = Decimal(str(reuse["reused_kw_months"])) * Decimal("184")
    assert abs(Decimal(result["opportunity_value"]) - expected) <= expected * Decimal("0.002")
    assert result["ranked_by"] == "cash" and Decimal(result["total_return"]) == Decimal(result["cash_return"])
    assert any("valued once" in s for s in result["reasoning"])
    opted = create(ops_api, selection={"migration_plan_id": plan_id}, demands=[], rank_with_freed_power=True)
    assert opted.json()["result"]["ranked_by"] == "cash + freed power"


def test_unlinked_plan_gives_freed_power_no_value(ops_api, small_fleet):
    result = create(ops_api, demands=[]).json()["result"]
    assert result["opportunity_value"] == "0.00" and result["power_reuse"] is None
    assert any("not valued" in s for s in result["reasoning"])


def test_plan_page_never_preselects_allocated_nodes_and_steps_refuse_them(operator_client, ops_api, small_fleet):
    from tests.fleet.lifecycle_helpers import allocate, place

    plan_id = create(ops_api).json()["id"]
    plan = DispositionPlan.objects.get(pk=plan_id)
    node = plan.assignments.order_by("node__hostname").first().node
    allocate(node)
    place(node, "decommissioning")
    html = operator_client.get(f"/plans/disposition/{plan_id}/").content.decode()
    assert f'value="{node.pk}" data-allocated="job of tenant acme"' in html  # "all" skips it
    assert ":not([data-allocated])" in html and "allocated: job (acme)" in html
    url = f"/plans/disposition/{plan_id}/nodes/"
    asked = operator_client.post(url, {"action": "sanitize", "node": [node.pk]}).content.decode()
    assert "allocation job of tenant acme" in asked and 'name="force"' in asked
    refused = operator_client.post(url, {"action": "sanitize", "node": [node.pk], "confirmed": "yes"}, follow=True)
    assert "is allocated (job of tenant acme)" in refused.content.decode()
    node.refresh_from_db()
    assert node.lifecycle == "decommissioning"
    forced = {"action": "sanitize", "node": [node.pk], "confirmed": "yes", "force": "yes"}
    operator_client.post(url, forced, follow=True)
    node.refresh_from_db()
    assert node.lifecycle == "sanitizing"


def test_plans_are_listed_where_they_are_created(ops_api, small_fleet):
    from rest_framework.test import APIClient

    from core.services.tokens import create_api_token
    from tenants.models import Tenant

    first, second = create(ops_api).json()["id"], create(ops_api, name="second").json()["id"]
    page = ops_api.get("/api/v1/ops/disposition-plans?page_size=1")
    assert page.status_code == 200 and [p["id"] for p in page.json()["results"]] == [second]
    rest = ops_api.get(f"/api/v1/ops/disposition-plans?page_size=1&page_token={page.json()['next_page_token']}")
    assert [p["id"] for p in rest.json()["results"]] == [first]
    assert ops_api.get("/api/v1/ops/migration-plans").json() == {"results": [], "next_page_token": None}
    _, tenant_token = create_api_token(
        kind="tenant", tenant=Tenant.objects.create(slug="acme", name="Acme"), role="admin", actor="test"
    )
    tenant = APIClient()
    tenant.credentials(HTTP_AUTHORIZATION=f"Bearer {tenant_token}")
    assert tenant.get("/api/v1/ops/disposition-plans").status_code == 403  # operators only
    assert ops_api.get("/api/v1/ops/disposition-plans?page_size=0").status_code == 400
    assert ops_api.get("/api/v1/ops/disposition-plans?page_token=forged").status_code == 400


# ---- market bounds, the exact split and a linked migration plan (issue 39) ---------------------

DOCS_DEMANDS = [
    {
        "pool": "inference",
        "nodes_wanted": 64,
        "value_per_gpu_hour": "2.00",
        "utilisation": "0.80",
        "horizon_months": 24,
    },
    {"pool": "batch", "nodes_wanted": 32, "value_per_gpu_hour": "1.40", "utilisation": "0.70", "horizon_months": 24},
]


def test_with_no_demand_and_no_cap_the_demo_splits_because_of_the_default_market(ops_api, operator_client):
    seed_fleet(gpus=2048)
    r = create(ops_api, demands=[])
    assert r.status_code == 201, r.json()
    result = r.json()["result"]
    assert result["node_count"] == 256
    used = [o for o, n in result["split"].items() if n]
    assert len(used) >= 2 and 0 < result["split"]["lease"] < 256
    market = {b["name"]: b for b in result["market"]}
    assert (
        market["lease_absorption_h100"]["value"] == "8" and "economics.csv" in market["lease_absorption_h100"]["source"]
    )
    assert not any(b["overridden"] for b in result["market"])
    lease = next(a for a in result["allocations"] if a["option"] == "lease")
    assert lease["tranches"][0]["start_month"] == 2 and all(t["nodes"] <= 8 for t in lease["tranches"])
    plan = DispositionPlan.objects.get(pk=r.json()["id"])
    assert set(plan.assignments.values_list("constraint", flat=True)) == set(result["constraints"])
    assert sum(result["constraints"].values()) == 256
    page = operator_client.get(f"/plans/disposition/{plan.pk}/").content.decode()
    assert 'id="market"' in page and "lease_absorption_h100" in page and "Decided by" in page


def test_the_docs_example_with_a_lease_cap_of_64_gives_batch_its_32_nodes_and_sells_fewer(ops_api):
    seed_fleet(gpus=2048)
    r = create(ops_api, demands=DOCS_DEMANDS, lease_cap_nodes=64)
    assert r.status_code == 201, r.json()
    result = r.json()["result"]
    pools = {a["pool"]: a["nodes"] for a in result["allocations"] if a["option"] == "redeploy"}
    assert pools == {"inference": 64, "batch": 32}
    assert result["split"]["lease"] == 64 and result["split"]["resale"] == 96 < 128
    assert any("lease cap of 64" in a["reason"] for a in result["allocations"] if a["option"] == "resale")


def test_market_overrides_need_a_reason_are_bounded_and_shown(ops_api, operator_client, small_fleet):
    missing = create(ops_api, demands=[], market_overrides={"lease_absorption_h100": "40"})
    assert missing.status_code == 400 and missing.json()["errors"][0]["field"] == "override_reason"
    for bad in (
        {"lease_vacancy": "1.5"},
        {"resale_depth_h100": "2.5"},
        {"resale_depth_b300": "4"},
        {"lease_vacancy": "-1"},
    ):
        r = create(ops_api, demands=[], market_overrides=bad, override_reason="x")
        assert r.status_code == 400 and r.json()["errors"][0]["field"].startswith("market_overrides"), bad
    many = {f"k{i}": "1" for i in range(500)}
    assert create(ops_api, demands=[], market_overrides=many, override_reason="x").status_code == 400
    assert not DispositionPlan.objects.exists()
    r = create(
        ops_api, demands=[], market_overrides={"lease_absorption_h100": "40"}, override_reason="signed LOI, 40 a month"
    )
    assert r.status_code == 201, r.json()
    bound = {b["name"]: b for b in r.json()["result"]["market"]}["lease_absorption_h100"]
    assert bound["value"] == "40" and bound["overridden"] and "signed LOI, 40 a month" in bound["source"]
    assert r.json()["result"]["override_reason"] == "signed LOI, 40 a month"
    page = operator_client.get(f"/plans/disposition/{r.json()['id']}/").content.decode()
    assert "signed LOI, 40 a month" in page and "overridden" in page


def _migration_plan(ops_api, floor_gpus: int, apply: bool):
    body = {
        "start": "2026-07-06",
        "floor_unit": "gpus",
        "capacity_floor_gpus": floor_gpus,
        "deliveries": [
            {"date": d, "scalable_units": 1, "racks_per_unit": 8}
            for d in ("2026-08-03", "2026-09-28", "2027-04-12", "2027-07-19")
        ],
    }
    return (
        _migration(ops_api, body)
        if apply
        else ops_api.post(
            "/api/v1/ops/migration-plans", body, format="json", HTTP_IDEMPOTENCY_KEY=str(uuid.uuid4())
        ).json()["id"]
    )


def test_a_disposition_linked_to_a_migration_that_drains_every_node_keeps_none_in_place(ops_api, monkeypatch):
    seed_fleet(gpus=2048)
    from datetime import datetime

    from django.utils import timezone

    monkeypatch.setattr(timezone, "now", lambda: datetime(2026, 7, 6, tzinfo=UTC))
    plan_id = _migration_plan(ops_api, 1536, apply=True)  # drains all 256 H100 nodes, reuses their kW
    unlinked = create(ops_api, demands=DOCS_DEMANDS).json()["result"]
    assert unlinked["split"]["redeploy"] + unlinked["split"]["lease"] > 0  # kept when nothing says otherwise
    r = create(ops_api, selection={"migration_plan_id": plan_id}, demands=DOCS_DEMANDS)
    assert r.status_code == 201, r.json()
    result = r.json()["result"]
    assert result["node_count"] == 256 and result["migration"]["drained_nodes"] == 256
    assert result["split"]["redeploy"] == result["split"]["lease"] == 0
    assert result["constraints"] == {"migration_drain": 256}
    assert any("cannot be kept in place: migration plan" in s for s in result["reasoning"])
    plan = DispositionPlan.objects.get(pk=r.json()["id"])
    assert set(plan.assignments.values_list("constraint", flat=True)) == {"migration_drain"}


def test_nodes_a_linked_migration_keeps_in_a_hall_it_refills_are_charged_when_kept(ops_api, monkeypatch):
    seed_fleet(gpus=2048)
    from datetime import datetime

    from django.utils import timezone

    monkeypatch.setattr(timezone, "now", lambda: datetime(2026, 7, 6, tzinfo=UTC))
    plan_id = _migration_plan(ops_api, 2600, apply=False)  # keeps some H100s in hall 1, lands racks there
    r = create(ops_api, demands=[], migration_plan_id=plan_id)  # linked, selection by GPU model
    assert r.status_code == 201, r.json()
    result = r.json()["result"]
    migration = result["migration"]
    assert migration["drained_nodes"] > 0 and migration["kept_in_refilled_halls"] > 0
    assert migration["drained_nodes"] + migration["kept_in_refilled_halls"] + migration["untouched"] == 256
    kept = [a for a in result["allocations"] if a["option"] in ("lease", "redeploy")]
    assert kept and all("refills" in a["block"] and Decimal(a["blocked_value"]) > 0 for a in kept)
    drained = [a for a in result["allocations"] if "drained" in a["block"]]
    assert drained and {a["option"] for a in drained} <= {"resale", "recycle"}
    assert any("is charged" in s for s in result["reasoning"])
    clash = create(ops_api, selection={"migration_plan_id": plan_id}, migration_plan_id=str(uuid.uuid4()))
    assert clash.status_code == 400


def test_only_operators_with_the_permission_create_disposition_plans(ops_api, small_fleet, django_user_model):
    from django.contrib.auth.models import Group
    from rest_framework.test import APIClient

    from core.services.tokens import create_api_token
    from tenants.models import Tenant

    viewer = django_user_model.objects.create_user("ro", password="x", is_staff=True)
    viewer.groups.add(Group.objects.get(name="read-only"))
    _, plain = create_api_token(kind="operator", user=viewer, actor="test")
    as_viewer = APIClient()
    as_viewer.credentials(HTTP_AUTHORIZATION=f"Bearer {plain}")
    refused = create(as_viewer)
    assert refused.status_code == 403 and "planning.add_dispositionplan" in refused.content.decode()
    _, tenant_token = create_api_token(
        kind="tenant", tenant=Tenant.objects.create(slug="acme", name="Acme"), role="admin", actor="test"
    )
    as_tenant = APIClient()
    as_tenant.credentials(HTTP_AUTHORIZATION=f"Bearer {tenant_token}")
    assert create(as_tenant).status_code in (401, 403)
    assert not DispositionPlan.objects.exists()
    plan_id = create(ops_api).json()["id"]
    assert as_viewer.get(f"/api/v1/ops/disposition-plans/{plan_id}").status_code == 200  # reading is allowed
    assert as_tenant.get(f"/api/v1/ops/disposition-plans/{plan_id}").status_code in (401, 403)


def test_the_plan_page_records_custody_with_its_kind_and_the_same_refusal(operator_client, ops_api, small_fleet):
    from fleet.models import CustodyTransfer
    from fleet.services.sanitization import record_sanitization
    from tests.fleet.lifecycle_helpers import place, report_drives

    plan_id = create(ops_api).json()["id"]
    node = DispositionPlan.objects.get(pk=plan_id).assignments.order_by("node__hostname").first().node
    place(node, "sanitizing")
    report_drives(node)
    for drive in node.drives.all():
        record_sanitization(
            drive=drive, method="clear", technique="overwrite", tool="nvme-cli", verified=True, evidence="ok", actor="t"
        )
    url = f"/plans/disposition/{plan_id}/nodes/"
    step = {"action": "custody", "node": [node.pk], "to_party": "Buyer Ltd", "document_ref": "SALE-1"}
    page = operator_client.post(url, step, follow=True).content.decode()
    assert "kind of party" in page and not CustodyTransfer.objects.exists()
    page = operator_client.post(url, {**step, "destination_kind": "buyer"}, follow=True).content.decode()
    serials = sorted(node.drives.values_list("serial", flat=True))
    assert all(s in page for s in serials) and "purge or destroy" in page
    assert not CustodyTransfer.objects.exists()
    operator_client.post(url, {**step, "destination_kind": "own_lab", "to_party": "Our lab"}, follow=True)
    transfer = CustodyTransfer.objects.get()
    assert (transfer.destination_kind, transfer.leaves_organisation, transfer.required_method) == (
        "own_lab",
        False,
        "clear",
    )
    html = operator_client.get(f"/plans/disposition/{plan_id}/").content.decode()
    assert 'name="destination_kind"' in html and "Destruction vendor" in html


def test_the_new_plan_form_overrides_a_market_bound_with_a_reason(operator_client, small_fleet):
    form = {"name": "form plan", "gpu_model": "H100", "horizon_months": "24", "channel": "broker"}
    page = operator_client.get("/plans/disposition/").content.decode()
    assert 'name="market_lease_absorption_h100"' in page and "economics.csv" in page
    refused = operator_client.post("/plans/disposition/", {**form, "market_resale_depth_h100": "4"})
    assert refused.status_code == 200 and b"override_reason" in refused.content
    r = operator_client.post(
        "/plans/disposition/", {**form, "market_resale_depth_h100": "4", "override_reason": "broker quote: 4 a month"}
    )
    assert r.status_code == 302
    plan = DispositionPlan.objects.get(name="form plan")
    bound = {b["name"]: b for b in plan.result["market"]}["resale_depth_h100"]
    assert bound["value"] == "4" and "broker quote: 4 a month" in bound["source"]
