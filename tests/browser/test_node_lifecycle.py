"""An operator drains a quarantined node in the console and watches it move through the states."""

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_drain_then_validate_from_the_node_page(page, live_server, login, screenshot, django_user_model):
    from devtools.services.fleet_seed import seed_fleet
    from fleet.models import Node
    from fleet.services.reconcile import reconcile_nodes

    seed_fleet(gpus=64)
    django_user_model.objects.create_user("alice", password="s3cret-pass", is_staff=True, is_superuser=True)
    node = Node.objects.order_by("hostname").first()
    Node.objects.filter(pk=node.pk).update(lifecycle="quarantined")  # setup: the health policy pulled it
    login(page, "alice", "s3cret-pass")
    url = f"{live_server.url}/fleet/nodes/{node.pk}/"
    page.goto(url)
    buttons = page.locator("#node-actions button").all_inner_texts()
    assert "Drain…" in buttons and "Validate" not in buttons  # "…": it asks first
    page.fill("input[name=reason]", "XID 79 on gpu3")
    page.click("button[value=drain]")
    page.wait_for_selector("#confirm-action")
    assert "no tenant is affected" in page.locator("#confirm-action").inner_text()
    page.click("#confirm-action button[type=submit]")
    page.wait_for_load_state("networkidle")
    assert "Draining" in page.locator("h1").inner_text()
    assert "cordoned — XID 79 on gpu3" in page.locator("#node-state").inner_text()
    reconcile_nodes()  # no tenant on it: the reconciler moves it on
    page.goto(url)
    assert "Remediating" in page.locator("h1").inner_text()
    page.click("button[value=validate]")
    page.wait_for_load_state("networkidle")
    assert "Validating" in page.locator("h1").inner_text()
    history = page.locator("#node-events").inner_text()
    assert "draining → remediating" in history and "remediating → validating" in history
    screenshot(page, "node-page")
    assert page.console_errors == []
