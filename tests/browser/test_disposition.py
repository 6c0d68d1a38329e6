"""Creating a disposition plan in the console and seeing its split chart in headless Chromium."""

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_create_plan_and_see_the_split_chart(page, live_server, login, screenshot, django_user_model):
    from devtools.services.fleet_seed import seed_fleet

    seed_fleet(gpus=256)
    django_user_model.objects.create_user("alice", password="s3cret-pass", is_staff=True, is_superuser=True)
    login(page, "alice", "s3cret-pass")
    page.goto(f"{live_server.url}/plans/disposition/")
    page.fill("input[name=name]", "H100 refresh")
    page.click("#create-plan")
    page.wait_for_load_state("networkidle")
    assert "/plans/disposition/" in page.url and page.url.rstrip("/") != f"{live_server.url}/plans/disposition"
    page.wait_for_selector("#split-chart .main-svg")
    assert page.locator("#split-redeploy").inner_text() == "32"  # 64 wanted, 32 H100 nodes in the fleet
    assert page.locator("#returns-chart-0 .main-svg").count() >= 1
    assert "Redeploy 32 nodes" in page.locator("#reasoning").inner_text()
    # the market bounds the split respected, with their sources, and what decided each part
    assert "lease_absorption_h100" in page.locator("#market").inner_text()
    assert "economics.csv" in page.locator("#market").inner_text()
    assert "best_return" in page.locator("#allocations").inner_text()
    screenshot(page, "disposition-plan")
    assert page.console_errors == []
