"""The /plans/ console: form prefilled from the fleet, plan page verdict-first, fixed query counts, apply."""

import pytest

from planning.models import MigrationPlan, PlannedAction
from planning.services.migration_plans import create_plan

START = "2026-07-06"
# The 64-GPU fleet is replaced by one NVL72 rack landing in the liquid hall.
SMALL = {
    "start": START,
    "deliveries": [{"date": "2026-08-03", "scalable_units": 1, "racks_per_unit": 1}],
    "facility_upgrades": [],
}


def _form(client):
    html = client.get("/plans/new/")
    assert html.status_code == 200
    ctx = html.context["values"]
    return {
        "name": "demo",
        "start": START,
        "halls": ctx["halls"],
        "target_node_type": ctx["target_node_type"],
        "target_perf_per_gpu": "",
        "workload": ctx["workload"],
        "floor_unit": ctx["floor_unit"],
        "deliveries": ctx["deliveries"],
        "burn_in_days": "",
        "cut_over_days": "1",
        "drain_days": "7",
        "sanitise_days": "7",
        "ship_days": "7",
        "cdu_positions": ctx["cdu_positions"],
        "cdu_start": START,
        "cdu_lead_time_days": "",
        "cdu_kw_after": "",
        "capacity_floor_gpus": str(ctx["capacity_floor_gpus"]),
        "capacity_floor_perf": str(ctx["capacity_floor_perf"]),
        "largest_job_gpus": str(ctx["largest_job_gpus"]),
        "horizon_weeks": "104",
    }


def test_form_is_prefilled_from_the_fleet_and_creates_a_plan(operator_client, small_fleet):
    data = _form(operator_client)
    # Floor = today's 64 H100 GPUs x 1.0 H100-equivalents; one 8-rack NVL72 unit covers 9/8 of it.
    assert data["capacity_floor_perf"] == "64.0" and data["capacity_floor_gpus"] == "0"
    assert data["floor_unit"] == "h100e" and data["workload"] == "training" and data["largest_job_gpus"] == "32"
    assert data["target_node_type"] == "gb200-nvl72" and len(data["deliveries"].splitlines()) == 1
    response = operator_client.post("/plans/new/", data)
    plan = MigrationPlan.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/plans/{plan.id}/"
    assert plan.created_by == "user:op"


def test_bad_form_input_shows_field_errors(operator_client, small_fleet):
    data = {**_form(operator_client), "deliveries": "2026-08-03, x", "capacity_floor_gpus": "-5"}
    response = operator_client.post("/plans/new/", data)
    assert response.status_code == 400
    assert b"date, scalable units, racks per unit" in response.content
    data["deliveries"] = "2026-08-03, 1, 8"
    response = operator_client.post("/plans/new/", data)
    assert response.status_code == 400 and b"capacity_floor_gpus" in response.content
    assert not MigrationPlan.objects.exists()


def test_plan_page_shows_verdict_first_charts_and_sources_then_apply(operator_client, small_fleet):
    plan = create_plan(parameters=SMALL, actor="test")
    assert plan.feasible, plan.result["fixes"]
    html = operator_client.get(f"/plans/{plan.id}/").content.decode()
    assert html.index('id="facility-verdict"') < html.index('id="summary"') < html.index('id="phases"')
    for marker in (
        'id="chart-gpus-data"',
        'id="chart-power-data"',
        "GPU-days below floor",
        "generations.csv",
        "facility.csv",
        "Apply plan",
        "vendor/plotly.min.js",
    ):
        assert marker in html, marker
    asked = operator_client.get(f"/plans/{plan.id}/apply/").content.decode()
    assert "Apply plan" in asked and 'id="confirm-decommissions"' in asked and 'id="confirm-tenants"' in asked
    assert not PlannedAction.objects.exists()  # asking schedules nothing
    response = operator_client.post(f"/plans/{plan.id}/apply/")
    assert response.status_code == 302
    html = operator_client.get(f"/plans/{plan.id}/").content.decode()
    assert 'id="scheduled-work"' in html and "Apply plan" not in html
    count = PlannedAction.objects.count()
    operator_client.post(f"/plans/{plan.id}/apply/")
    assert PlannedAction.objects.count() == count > 0


def test_infeasible_plan_page_shows_fixes_instead_of_a_schedule(operator_client, small_fleet):
    plan = create_plan(parameters={**SMALL, "floor_unit": "gpus", "capacity_floor_gpus": 72}, actor="t")
    html = operator_client.get(f"/plans/{plan.id}/").content.decode()
    assert not plan.feasible and 'id="fixes"' in html
    assert 'id="phases"' not in html and "Apply plan" not in html


@pytest.mark.parametrize("gpus, plans", [(64, 1), (128, 6)])
def test_pages_have_a_fixed_query_count(operator_client, django_assert_max_num_queries, gpus, plans):
    from devtools.services.fleet_seed import seed_fleet
    from planning.services.migration_plans import apply_plan

    seed_fleet(gpus=gpus)
    params = {**SMALL, "deliveries": [{"date": "2026-08-03", "scalable_units": 1, "racks_per_unit": -(-gpus // 72)}]}
    created = [create_plan(parameters=params, actor="t") for _ in range(plans)]
    apply_plan(plan_id=created[0].id, actor="t")
    with django_assert_max_num_queries(4):  # session, user, count, page
        assert operator_client.get("/plans/").status_code == 200
    with django_assert_max_num_queries(4):  # session, user, plan, scheduled work
        assert operator_client.get(f"/plans/{created[0].id}/").status_code == 200


def test_pages_need_an_operator(client, db):
    assert client.get("/plans/").status_code == 302
    assert client.get("/plans/new/").status_code == 302


def test_demo_seed_step_plans_once(small_fleet):
    from io import StringIO

    from planning.services.migration_plans import seed_demo_plan

    out = StringIO()
    seed_demo_plan(out)
    seed_demo_plan(out)
    assert MigrationPlan.objects.count() == 1 and "already there" in out.getvalue()


def test_scheduled_work_is_listed_in_the_admin(operator_client, small_fleet, django_assert_max_num_queries):
    from planning.services.migration_plans import apply_plan

    plan = create_plan(parameters=SMALL, actor="t")
    apply_plan(plan_id=plan.id, actor="t")
    response = operator_client.get("/admin/planning/plannedaction/?kind__exact=decommission")
    assert response.status_code == 200
    assert response.content.decode().count("dc1-gpu0000") == 8  # every node of the 64-GPU fleet
    assert operator_client.get(f"/admin/planning/migrationplan/{plan.id}/change/").status_code == 200
