"""Migration plans through the ops API: create, read, apply; auth, idempotency, validation."""

import uuid
from datetime import date, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from core.models import AuditEvent
from devtools.services.fleet_seed import seed_fleet
from fleet.choices import Lifecycle
from fleet.services.lifecycle import STATE_TIMEOUTS
from planning.models import MigrationPlan, PlannedAction
from planning.plan_json import plan_to_json
from planning.services.migration_plans import recompute

URL = "/api/v1/ops/migration-plans"
START = "2026-07-06"


def _post(client, body, key=None, url=URL):
    return client.post(url, body, format="json", HTTP_IDEMPOTENCY_KEY=key or str(uuid.uuid4()))


@pytest.fixture
def demo_fleet(db):
    return seed_fleet(gpus=2048)


def test_demo_fleet_two_nvl72_units_retire_all_256_h100_nodes_against_an_h100_equivalent_floor(ops_api, demo_fleet):
    # The defaults on the demo inventory: floor = today's 2,048 H100-equivalents (training), two
    # 8-rack NVL72 scalable units = 1,152 GPUs x 2.53 = 2,914.56 H100-equivalents.
    response = _post(ops_api, {"start": START})
    assert response.status_code == 201, response.json()
    body = response.json()
    params = body["inputs"]["parameters"]
    assert params["floor_unit"] == "h100e" and params["capacity_floor_perf"] == 2048.0
    assert [(d["date"], d["racks_per_unit"]) for d in params["deliveries"]] == [("2026-08-03", 8), ("2026-09-28", 8)]
    v = body["result"]["verdicts"]
    assert body["feasible"] is True and body["status"] == "draft"
    assert v["old_fleet_retired"] is True and v["floor_held"] is True
    assert v["min_capacity_perf"] == 2048.0 and v["trough_perf_days"] == 0
    assert v["naive_trough_perf_days"]["decommission_first"] == 104_760.32
    drained = [p for p in body["result"]["phases"] if p["kind"] == "drain"]
    assert sum(p["nodes"] for p in drained) == 256
    assert body["result"]["finish"] == "2026-10-26"
    assert {p["status"] for p in body["result"]["position_verdicts"]} == {"ok_now", "after_upgrade", "never"}
    assert any("cdu_lead_time" in a["source"] or "months" in a["source"] for a in body["result"]["assumptions"])
    assert response["Location"].endswith(body["id"])
    got = ops_api.get(f"{URL}/{body['id']}")
    assert got.status_code == 200 and got.json()["result"] == body["result"]
    # The stored inputs recompute the same plan without reading the inventory.
    assert plan_to_json(recompute(MigrationPlan.objects.get(pk=body["id"]))) == body["result"]


def test_apply_schedules_intake_and_decommission_once_and_is_audited(ops_api, demo_fleet):
    plan_id = _post(ops_api, {"start": START}).json()["id"]
    first = _post(ops_api, None, url=f"{URL}/{plan_id}/apply")
    assert first.status_code == 200 and first.json()["status"] == "applied"
    # The new racks all fit the liquid hall: hall 1's CDU work is not needed, so not scheduled.
    assert first.json()["actions"] == {"decommission": 256, "node_intake": 16}
    intake = PlannedAction.objects.filter(plan_id=plan_id, kind="node_intake")
    assert sum(a.gpus for a in intake) == 1152
    assert all(a.ends_on > a.starts_on for a in intake)
    count = PlannedAction.objects.count()
    again = _post(ops_api, None, url=f"{URL}/{plan_id}/apply")  # a new key: applying twice adds nothing
    assert again.status_code == 200 and PlannedAction.objects.count() == count
    audits = AuditEvent.objects.filter(object_id=plan_id).values_list("action", flat=True)
    assert sorted(audits) == ["migration_plan.apply", "migration_plan.create"]


def test_infeasible_plan_says_what_fixes_it_and_cannot_be_applied(ops_api, demo_fleet):
    body = _post(ops_api, {"start": START, "facility_upgrades": [], "floor_unit": "gpus"}).json()
    assert body["inputs"]["parameters"]["capacity_floor_gpus"] == 2048
    # In raw GPUs the default deliveries bring 9/8 of 2,048 GPUs = 32 NVL72 racks; without the CDU work
    # only the 16 liquid positions can take them.
    assert len(body["inputs"]["parameters"]["deliveries"]) == 4
    assert body["feasible"] is False
    assert any(
        f.startswith("add 16 positions that can take gb200-nvl72 (132 kW liquid)") for f in body["result"]["fixes"]
    )
    assert body["result"]["finish"] is None
    response = _post(ops_api, None, url=f"{URL}/{body['id']}/apply")
    assert response.status_code == 409 and response.json()["code"] == "plan_infeasible"
    assert not PlannedAction.objects.exists()


def test_replay_returns_the_stored_answer(ops_api, small_fleet):
    key = str(uuid.uuid4())
    first = _post(ops_api, {"start": START}, key=key)
    second = _post(ops_api, {"start": START}, key=key)
    assert first.status_code == second.status_code == 201
    assert second["Idempotent-Replayed"] == "true"
    assert second.json() == first.json()
    assert MigrationPlan.objects.count() == 1


def test_missing_idempotency_key_is_refused(ops_api, small_fleet):
    response = ops_api.post(URL, {"start": START}, format="json")
    assert response.status_code == 400 and response.json()["code"] == "idempotency_key_missing"
    assert not MigrationPlan.objects.exists()


@pytest.mark.parametrize(
    "body, fields",
    [
        (
            {"deliveries": [{"date": "2026-13-01", "scalable_units": 0, "racks_per_unit": 8}]},
            {"deliveries[0].date", "deliveries[0].scalable_units"},
        ),
        ({"halls": [str(uuid.UUID(int=1))]}, {"halls[0]"}),
        ({"target_node_type": "no-such-type"}, {"target_node_type"}),
        ({"facility_upgrades": [{"positions": ["hall-1-r9999"]}]}, {"facility_upgrades[0].positions[0]"}),
        ({"deliveries": [{"date": "2026-01-01", "scalable_units": 1, "racks_per_unit": 8}]}, {"deliveries[0].date"}),
        ({"capacity_floor_gpus": -1, "horizon_weeks": "many"}, {"capacity_floor_gpus", "horizon_weeks"}),
        ({"workload": "mining", "floor_unit": "watts"}, {"workload", "floor_unit"}),
        (
            {"perf_overrides": {"h100-sxm-8x": 0}, "target_perf_per_gpu": 1e9},
            {"perf_overrides.h100-sxm-8x", "target_perf_per_gpu"},
        ),
        ({"hall_facilities": [{"hall": str(uuid.UUID(int=1)), "cdu_units": 0}]}, {"hall_facilities[0].cdu_units"}),
        ({"hall_facilities": [{"hall": str(uuid.UUID(int=1))}]}, {"hall_facilities[0].hall"}),
        ([1, 2], {"non_field_errors"}),
    ],
)
def test_bad_input_is_a_validation_problem_with_field_errors(ops_api, small_fleet, body, fields):
    response = _post(ops_api, body if not isinstance(body, dict) else {"start": START, **body})
    assert response.status_code == 400
    problem = response.json()
    assert problem["code"] == "validation_error"
    assert fields <= {e["field"] for e in problem["errors"]}
    assert not MigrationPlan.objects.exists()


def test_tenant_and_agent_tokens_are_forbidden(db, small_fleet, operator_token):
    from core.api.agent_tokens import mint_agent_token
    from core.services.tokens import create_api_token
    from fleet.models import Node
    from tenants.models import Tenant

    tenant = Tenant.objects.create(slug="acme", name="Acme")
    _, tenant_token = create_api_token(kind="tenant", tenant=tenant, role="admin", actor="test")
    agent_token = mint_agent_token(Node.objects.first().id)
    from rest_framework.test import APIClient

    for token in (tenant_token, agent_token):
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
        assert _post(client, {"start": START}).status_code == 403
        assert client.get(f"{URL}/{uuid.uuid4()}").status_code == 403
    assert APIClient().get(f"{URL}/{uuid.uuid4()}").status_code == 401
    assert not MigrationPlan.objects.exists()


def test_unknown_or_malformed_id_is_404(ops_api, db):
    assert ops_api.get(f"{URL}/{uuid.uuid4()}").status_code == 404
    assert ops_api.get(f"{URL}/not-a-uuid").json()["code"] == "not_found"
    assert _post(ops_api, None, url=f"{URL}/{uuid.uuid4()}/apply").status_code == 404


def test_schema_describes_the_endpoints(api, db):
    schema = api.get("/api/v1/schema/", HTTP_ACCEPT="application/json").json()
    paths = schema["paths"]
    create = paths["/api/v1/ops/migration-plans"]["post"]
    assert {"201", "400", "403"} <= set(create["responses"])
    assert any(p["name"] == "Idempotency-Key" and p["required"] for p in create["parameters"])
    assert "get" in paths["/api/v1/ops/migration-plans/{id}"]
    assert "post" in paths["/api/v1/ops/migration-plans/{id}/apply"]
    assert "deliveries" in schema["components"]["schemas"]["PlanParametersRequest"]["properties"]


@pytest.mark.parametrize(
    "extra",
    [
        {"horizon_weeks": 4},
        {"deliveries": [{"date": "2030-01-01", "scalable_units": 1, "racks_per_unit": 1}]},
        {"burn_in_days": 365, "drain_days": 365},
        {"capacity_floor_gpus": 0, "largest_job_gpus": 10_000_000},
        {"target_node_type": "h100-sxm-8x"},
        {"target_node_type": "a100-sxm-8x"},
        {"power_margin": 0.5, "target_perf_per_gpu": 0.01},
        {"facility_upgrades": [{"positions": ["hall-1-r0001"], "lead_time_days": 0, "power_kw_after": 0}]},
        {"facility_upgrades": [{"positions": ["hall-1-r0001", "hall-1-r0001"]}]},
        {"deliveries": [{"date": "2026-07-06", "scalable_units": 1000, "racks_per_unit": 1000}]},
        {"halls": []},
        {"name": "x" * 500},
        {"workload": "inference", "floor_unit": "gpus", "capacity_floor_perf": 1e9},
        {"perf_overrides": {"no-such-type": 3}},
        {"start": None, "deliveries": None, "facility_upgrades": None},
    ],
)
def test_odd_input_is_planned_or_refused_never_a_server_error(ops_api, small_fleet, extra):
    response = _post(ops_api, {"start": START, **extra})
    assert response.status_code in (201, 400)
    if response.status_code == 400:
        assert response.json()["code"] == "validation_error" and response.json()["errors"]
    else:
        assert response.json()["feasible"] in (True, False) and response.json()["result"]["headline"]


def test_defaults_follow_the_halls_in_scope(ops_api, small_fleet):
    from fleet.models import Hall

    liquid = Hall.objects.get(name="hall-2")
    body = _post(ops_api, {"start": START, "halls": [str(liquid.id)]}).json()
    params = body["inputs"]["parameters"]
    # no fleet and no air positions there: no CDU to install, nothing to hold
    assert params["facility_upgrades"] == [] and params["capacity_floor_gpus"] == 0
    assert {v["status"] for v in body["result"]["position_verdicts"]} == {"ok_now"}


def test_the_plan_list_counts_every_plans_work_in_one_query(ops_api, small_fleet):
    """A page of plans costs the same number of queries whatever its length (no query per plan)."""

    def listed(expected_plans):
        with CaptureQueriesContext(connection) as queries:
            body = ops_api.get(f"{URL}?page_size=50").json()
        assert len(body["results"]) == expected_plans
        assert all(isinstance(plan["actions"], dict) for plan in body["results"])
        return len(queries)

    _post(ops_api, {"start": START})
    one = listed(1)
    for _ in range(3):
        _post(ops_api, {"start": START})
    assert listed(4) == one


def test_hall_1_with_a_1536_floor_drains_no_node_before_the_first_gb200_can_land(ops_api, demo_fleet):
    from fleet.models import Hall

    hall = Hall.objects.get(name="hall-1")
    body = _post(ops_api, {"start": START, "halls": [str(hall.id)], "capacity_floor_perf": 1536}).json()
    result = body["result"]
    # Only hall 1's last 16 air positions can take an NVL72, after a CDU ready 2027-07-06 (12 months, week 53).
    # Greedy draining gave up 512 H100s (64 nodes) in week 0; now the first drain frees a CDU position three
    # weeks (drain, sanitise, ship) before the first GB200 lands there, and each drain's position or kW is
    # used within those three weeks.
    first_land = min(p["land"] for p in result["placements"])
    assert first_land == "2027-07-12"  # the week of 2027-07-06's readiness, week 53
    assert min(d["start"] for d in result["drains"]) == "2027-06-21"  # week 50
    for d in result["drains"]:
        if d["frees"] != "retirement":
            assert d["used"] is not None and date.fromisoformat(d["used"]) - date.fromisoformat(
                d["start"]
            ) <= timedelta(weeks=3)
    assert result["verdicts"]["given_up_perf_days"] < 1536 * 7 * 4  # at most a few weeks of a few racks
    assert body["feasible"] is True and result["verdicts"]["floor_held"] is True


def test_the_default_floor_counts_only_nodes_in_service(ops_api, demo_fleet):
    from fleet.models import Node

    # 16 nodes in repair and 8 burning in still hold racks and draw power, but they are not capacity today.
    ids = list(Node.objects.order_by("hostname").values_list("id", flat=True)[:24])
    Node.objects.filter(id__in=ids[:16]).update(lifecycle="repair")
    Node.objects.filter(id__in=ids[16:]).update(lifecycle="burn_in")
    params = _post(ops_api, {"start": START}).json()["inputs"]["parameters"]
    assert params["capacity_floor_perf"] == (256 - 24) * 8  # 1,856 H100-equivalents
    assert params["largest_job_gpus"] == 928  # half of the in-service pool
    resolved = MigrationPlan.objects.get().inputs["resolved"]
    assert sum(b["count"] for b in resolved["fleet"]) == 256  # every node still occupies its rack


def test_unknown_fields_are_refused_with_their_path(ops_api, small_fleet):
    for body, field in (
        ({"start": START, "floor": 2048}, "floor"),
        (
            {
                "start": START,
                "deliveries": [{"date": "2026-08-03", "scalable_units": 1, "racks_per_unit": 8, "racks": 8}],
            },
            "deliveries[0].racks",
        ),
        ({"start": START, "hall_facilities": [{"hall": str(uuid.UUID(int=1)), "cdus": 3}]}, "hall_facilities[0].cdus"),
        ({"start": START, "capacity_unit": {"label": "x", "per_gpu": {"a": 1}, "scale": 2}}, "capacity_unit.scale"),
    ):
        response = _post(ops_api, body)
        assert response.status_code == 400, body
        assert field in {e["field"] for e in response.json()["errors"]}, response.json()
    assert not MigrationPlan.objects.exists()


def test_a_capacity_unit_must_price_every_node_type_in_scope(ops_api, small_fleet):
    body = {"start": START, "capacity_unit": {"label": "output tokens/s", "per_gpu": {"gb200-nvl72": 1700.0}}}
    response = _post(ops_api, body)
    assert response.status_code == 400
    assert "capacity_unit.per_gpu" in {e["field"] for e in response.json()["errors"]}
    ok = _post(
        ops_api,
        {
            **body,
            "capacity_unit": {"label": "output tokens/s", "per_gpu": {"gb200-nvl72": 1700.0, "h100-sxm-8x": 690.0}},
        },
    )
    assert ok.status_code == 201, ok.json()
    assert ok.json()["result"]["perf_unit"] == "output tokens/s"
    assert ok.json()["inputs"]["parameters"]["floor_unit"] == "capacity_unit"


def test_the_default_delivery_cadence_scales_with_the_move():
    from planning.inputs import default_deliveries

    start = date(2026, 7, 6)
    # The demo: two units, one per date 8 weeks apart from week 4.
    assert [(d["date"], d["scalable_units"]) for d in default_deliveries(start, 2, 104)] == [
        ("2026-08-03", 1),
        ("2026-09-28", 1),
    ]
    # 100,000 H100s x 1.125 / 2.53 / 72 = 618 racks = 78 units: 7 dates (weeks 4-52), 12 units on the first
    # and 11 on the others, all within the first half of the horizon (not one a date until 2038).
    big = default_deliveries(start, 78, 104)
    assert [d["scalable_units"] for d in big] == [12] + [11] * 6
    assert sum(d["scalable_units"] for d in big) == 78
    assert max(d["date"] for d in big) == (start + timedelta(weeks=52)).isoformat()


def test_burn_in_defaults_to_the_lifecycle_deadline_as_the_field_says():
    from planning.api.serializers import PlanParametersSerializer

    help_text = str(PlanParametersSerializer().fields["burn_in_days"].help_text)
    assert "burn_in_deadline" in help_text and "24 h" in help_text
    assert STATE_TIMEOUTS[Lifecycle.BURN_IN] == timedelta(hours=24)
