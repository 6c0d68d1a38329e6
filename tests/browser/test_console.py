"""The console's login and Fleet page in headless Chromium."""

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_login_then_fleet_page(page, live_server, login, screenshot, django_user_model):
    from devtools.services.fleet_seed import seed_fleet

    seed_fleet(gpus=128)
    django_user_model.objects.create_user("alice", password="s3cret-pass", is_staff=True)

    page.goto(f"{live_server.url}/fleet/")
    assert "/accounts/login/" in page.url  # the console needs a login
    screenshot(page, "login")
    login(page, "alice", "s3cret-pass")
    page.goto(f"{live_server.url}/fleet/")
    rows = page.locator("#racks tbody tr")
    assert rows.count() == 8 + 16  # 8 H100 racks + 16 empty liquid positions
    assert page.locator("#racks").inner_text().count("Available · 2") == 8
    screenshot(page, "fleet-racks")
    assert page.console_errors == []
