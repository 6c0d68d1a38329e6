"""The migration planner in the console: create a plan in the form, read the verdict and the charts."""

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_create_a_plan_in_the_console(page, live_server, login, screenshot, django_user_model):
    from devtools.services.fleet_seed import seed_fleet

    seed_fleet(gpus=2048)
    from django.contrib.auth.models import Group

    alice = django_user_model.objects.create_user("alice", password="s3cret-pass", is_staff=True)
    alice.groups.add(Group.objects.get(name="operators"))  # creating and applying plans needs the permissions
    login(page, "alice", "s3cret-pass")
    page.goto(f"{live_server.url}/plans/")
    page.click("#new-plan")
    # prefilled from the seeded fleet: today's 2,048 H100-equivalents, two 8-rack NVL72 units
    assert page.input_value("#capacity_floor_perf") == "2048.0"
    page.click("#plan-submit")
    page.wait_for_selector("#facility-verdict")
    verdict = page.locator("#facility-verdict").inner_text()
    assert "ok now" in verdict and "after upgrade" in verdict and "never" in verdict
    assert page.locator("#kpi-min-perf").inner_text() == "2,048"
    assert page.locator("#kpi-min").inner_text() == "1,152"
    # plotly drew every chart (an svg per figure) from the local bundle
    page.wait_for_selector("#chart-power .main-svg")
    for chart in ("#chart-gpus", "#chart-perf", "#chart-power"):
        assert page.locator(f"{chart} .main-svg").count() >= 1
    assert "H100-equivalent (training)-days below floor" in page.locator("#chart-perf").inner_text()
    screenshot(page, "migration-plan")
    page.click("#apply-plan")  # asks first: what it schedules and whose nodes it touches
    page.wait_for_selector("#confirm-apply")
    assert "drained, sanitised and decommissioned" in page.locator("#confirm-decommissions").inner_text()
    page.click("#confirm-apply button[type=submit]")
    page.wait_for_selector("#scheduled-work")
    assert page.locator("#plan-status").inner_text() == "Applied"
    assert page.console_errors == []


def test_a_large_plan_shows_the_workers_progress_without_reloading(
    page, live_server, login, screenshot, django_user_model, monkeypatch
):
    from django.contrib.auth.models import Group

    from devtools.services.fleet_seed import seed_fleet
    from planning.models import MigrationPlan
    from planning.services import migration_plans
    from planning.services.plan_computation import compute_plan
    from planning.tasks import compute_migration_plan

    seed_fleet(gpus=64)
    queued: list[str] = []
    monkeypatch.setattr(migration_plans, "INLINE_MAX_RACKS", 0)  # the small fleet counts as large
    monkeypatch.setattr(compute_migration_plan, "delay", queued.append)  # this test plays the worker
    bob = django_user_model.objects.create_user("bob", password="s3cret-pass", is_staff=True)
    bob.groups.add(Group.objects.get(name="operators"))
    login(page, "bob", "s3cret-pass")
    page.goto(f"{live_server.url}/plans/new/")
    page.click("#plan-submit")
    page.wait_for_selector("#computation")
    assert page.locator("#computation-status").inner_text() == "Queued" and len(queued) == 1
    page.evaluate("window.sameDocument = true")
    MigrationPlan.objects.filter(pk=queued[0]).update(computation="running", progress=0.4)
    # a selector, not wait_for_function: the page's Content-Security-Policy forbids evaluating strings
    page.locator("#computation-percent", has_text="40").wait_for(timeout=15_000)
    assert page.locator("#computation-status").inner_text() == "Running"
    assert page.evaluate("window.sameDocument") is True  # polled, not reloaded
    screenshot(page, "migration-plan-computing")
    compute_plan(queued[0])
    page.wait_for_selector("#facility-verdict", timeout=15_000)  # done: the page shows the plan
    assert page.console_errors == []


def test_size_capacity_from_first_principles_and_migrate_in_its_unit(
    page, live_server, login, screenshot, django_user_model
):
    from django.contrib.auth.models import Group

    from devtools.services.fleet_seed import seed_fleet

    seed_fleet(gpus=2048)
    carol = django_user_model.objects.create_user("carol", password="s3cret-pass", is_staff=True)
    carol.groups.add(Group.objects.get(name="operators"))
    login(page, "carol", "s3cret-pass")
    page.goto(f"{live_server.url}/plans/capacity/")
    page.fill("#name", "chat 70B")
    page.select_option("#model_name", "llama-3.1-70b")
    page.fill("input[name=month_0]", "2026-08-01")
    page.fill("input[name=tokens_0]", "900000")
    page.fill("input[name=month_1]", "2026-10-01")
    page.fill("input[name=tokens_1]", "1900000")
    page.click("#capacity-form button[type=submit]")
    page.wait_for_selector("#months")
    # Each generation states its replica, concurrency (Little's law), latencies, prefill minimum and what binds.
    table = page.locator("#months").inner_text().lower()  # headers are styled in capitals
    assert "sequences / replica" in table and "prefill minimum" in table and "batch: memory" in table
    page.locator("#months details summary").first.click()
    assert "Little's law" in page.locator("#months details").first.inner_text()
    assert "output tokens/s (llama-3.1-70b, BF16, 1,000+250 tokens)" in page.locator("#unit").inner_text()
    page.wait_for_selector("#chart-need .main-svg")
    screenshot(page, "capacity-plan")
    page.click("#to-migration")
    page.wait_for_selector("#drains")
    assert "counted in output tokens/s (llama-3.1-70b" in page.content()
    assert "retirement" in page.locator("#drains").inner_text()
    assert page.console_errors == []
