"""Large migration plans are computed by a Celery task: queued, then running with the progress the
planner reports, then done (or failed with its reason); the plan page follows it by polling."""

import uuid

import pytest
from celery.exceptions import SoftTimeLimitExceeded
from django.contrib.auth.models import Group
from django.test import Client
from kombu.exceptions import OperationalError
from rest_framework.test import APIClient

from config.celery import app as celery_app
from core.services.tokens import create_api_token
from planning.engines.migration import planner
from planning.engines.migration.planner import demo_inputs, plan_migration
from planning.models import MigrationPlan
from planning.plan_json import plan_to_json
from planning.services import migration_plans, plan_computation
from planning.services.migration_plans import recompute
from planning.tasks import compute_migration_plan
from tenants.models import Tenant

URL = "/api/v1/ops/migration-plans"
START = "2026-07-06"
BODY = {"start": START, "deliveries": [{"date": "2026-08-03", "scalable_units": 1, "racks_per_unit": 1}]}


@pytest.fixture
def eager():
    """Celery runs the task in this process, as a worker would, when the transaction commits."""
    before = celery_app.conf.task_always_eager
    celery_app.conf.task_always_eager = True
    yield
    celery_app.conf.task_always_eager = before


@pytest.fixture
def large(monkeypatch):
    """Every plan counts as large, so the small test fleet goes through the worker path."""
    monkeypatch.setattr(migration_plans, "INLINE_MAX_RACKS", 0)


def _post(client, body=BODY):
    return client.post(URL, body, format="json", HTTP_IDEMPOTENCY_KEY=str(uuid.uuid4()))


def test_the_engine_reports_rising_progress_and_the_same_answer():
    seen: list[float] = []
    with_progress = plan_migration(demo_inputs(), seen.append)
    assert seen[0] == 0.0 and seen[-1] == 1.0
    assert seen == sorted(seen) and len(seen) >= 20
    assert with_progress == plan_migration(demo_inputs())


def test_small_plans_are_computed_in_the_request(ops_api, small_fleet, monkeypatch):
    queued = []
    monkeypatch.setattr(compute_migration_plan, "delay", queued.append)
    body = _post(ops_api).json()
    assert body["computation"] == "done" and body["progress"] == 1.0 and body["result"]["headline"]
    assert queued == []


def test_a_large_plan_is_queued_then_computed_by_the_task_recording_its_progress(
    ops_api, operator_client, small_fleet, large, eager, monkeypatch, django_capture_on_commit_callbacks
):
    stored_progress: list[float] = []

    def observed(inputs, report):
        # What a polling page would read from the database while the planner runs.
        def spy(fraction):
            report(fraction)
            stored_progress.append(MigrationPlan.objects.values_list("progress", flat=True).get())

        return planner.plan_migration(inputs, spy)

    monkeypatch.setattr(plan_computation, "plan_migration", observed)
    with django_capture_on_commit_callbacks(execute=False) as queued:
        created = _post(ops_api)
    assert created.status_code == 201
    body = created.json()
    assert (body["computation"], body["progress"], body["result"], body["feasible"]) == ("queued", 0.0, None, None)
    plan = MigrationPlan.objects.get(pk=body["id"])

    page = operator_client.get(f"/plans/{plan.pk}/")
    assert page.status_code == 200 and b'id="computation"' in page.content
    assert operator_client.get(f"/plans/{plan.pk}/progress/").json()["computation"] == "queued"

    for callback in queued:  # the commit: the eager task runs here
        callback()
    plan.refresh_from_db()
    assert plan.computation == "done" and plan.progress == 1.0 and plan.computed_at is not None
    assert plan.result == plan_to_json(recompute(plan))
    assert len(stored_progress) >= 10 and stored_progress == sorted(stored_progress)
    assert 0.0 < stored_progress[len(stored_progress) // 2] < 1.0  # progress was visible mid-run
    state = operator_client.get(f"/plans/{plan.pk}/progress/").json()
    assert state["computation"] == "done" and state["url"] == f"/plans/{plan.pk}/"
    assert b'id="facility-verdict"' in operator_client.get(f"/plans/{plan.pk}/").content
    assert ops_api.get(f"{URL}/{plan.pk}").json()["result"]["headline"] == plan.result["headline"]


def test_a_failed_computation_is_recorded_with_its_reason(
    ops_api, operator_client, small_fleet, large, eager, monkeypatch, django_capture_on_commit_callbacks
):
    def broken(inputs, report):
        report(0.3)
        raise ValueError("block h100x2: 9 nodes do not fit 1 positions")

    monkeypatch.setattr(plan_computation, "plan_migration", broken)
    with django_capture_on_commit_callbacks(execute=True):
        body = _post(ops_api).json()
    plan = MigrationPlan.objects.get(pk=body["id"])
    assert plan.computation == "failed" and plan.result is None
    assert plan.computation_error == "ValueError: block h100x2: 9 nodes do not fit 1 positions"
    state = operator_client.get(f"/plans/{plan.pk}/progress/").json()
    assert state["computation"] == "failed" and "do not fit" in state["error"]
    page = operator_client.get(f"/plans/{plan.pk}/")
    assert b"do not fit" in page.content and b"create the plan again" in page.content
    applied = ops_api.post(f"{URL}/{plan.pk}/apply", format="json", HTTP_IDEMPOTENCY_KEY=str(uuid.uuid4()))
    assert applied.status_code == 409 and not plan.actions.exists()
    # Running the task again does not recompute a failed plan.
    assert compute_migration_plan.apply(args=[str(plan.pk)]).get() is None


def _token(user=None, **kwargs) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {create_api_token(actor='test', user=user, **kwargs)[1]}")
    return client


def test_only_a_role_with_the_permission_may_start_a_plan(
    db, small_fleet, large, django_user_model, monkeypatch, django_capture_on_commit_callbacks
):
    queued = []
    monkeypatch.setattr(compute_migration_plan, "delay", queued.append)
    tenant = Tenant.objects.create(slug="acme", name="Acme")
    callers = {"tenant-token": _token(kind="tenant", tenant=tenant, role="admin")}
    for role in ("read-only", "billing-admins", "operators"):
        user = django_user_model.objects.create_user(role, password="pass-123-x", is_staff=True)
        user.groups.add(Group.objects.get(name=role))
        callers[role] = _token(user=user, kind="operator")
    for role in ("tenant-token", "read-only", "billing-admins"):
        with django_capture_on_commit_callbacks(execute=True):
            assert _post(callers[role]).status_code == 403, role
    assert not MigrationPlan.objects.exists() and queued == []
    with django_capture_on_commit_callbacks(execute=True):
        started = _post(callers["operators"])
    assert started.status_code == 201 and queued == [started.json()["id"]]

    console = django_user_model.objects.create_user("viewer", password="pass-123-x", is_staff=True)
    console.groups.add(Group.objects.get(name="read-only"))
    browser = Client()
    browser.force_login(console)
    refused = browser.post("/plans/new/", {"start": START})
    assert refused.status_code == 403 and MigrationPlan.objects.count() == 1


def test_a_plan_past_the_time_limit_or_an_unreachable_broker_fails_saying_what_to_do(
    ops_api, small_fleet, large, eager, monkeypatch, django_capture_on_commit_callbacks
):
    def too_slow(inputs, report):
        raise SoftTimeLimitExceeded()

    monkeypatch.setattr(plan_computation, "plan_migration", too_slow)
    with django_capture_on_commit_callbacks(execute=True):
        slow = MigrationPlan.objects.get(pk=_post(ops_api).json()["id"])
    slow.refresh_from_db()
    assert slow.computation == "failed" and "time limit" in slow.computation_error
    assert "narrow the scope" in slow.computation_error

    def broker_down(plan_id):
        raise OperationalError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    monkeypatch.setattr(compute_migration_plan, "delay", broker_down)
    with django_capture_on_commit_callbacks(execute=True):
        created = _post(ops_api)
    assert created.status_code == 201  # the plan is stored; its page says why it is not computing
    stuck = MigrationPlan.objects.get(pk=created.json()["id"])
    assert stuck.computation == "failed" and "check the broker (REDIS_URL)" in stuck.computation_error
