"""An operator power-cycles a node from its page through the emulated BMC and watches the
power go off and on (the page refreshes itself while the action is open)."""

import pytest

from tests.redfish import attach_bmc

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_power_cycle_from_the_node_page(
    page, live_server, login, screenshot, django_user_model, redfish_emulator, emulated_system
):
    from devtools.services.fleet_seed import seed_fleet
    from fleet.models import Node
    from fleet.services.power_sync import power_sync_pass

    seed_fleet(gpus=64)
    django_user_model.objects.create_user("alice", password="s3cret-pass", is_staff=True, is_superuser=True)
    node = Node.objects.order_by("hostname").first()
    system = emulated_system()
    attach_bmc(node, redfish_emulator, system)
    power_sync_pass(budget_s=30)
    login(page, "alice", "s3cret-pass")
    page.goto(f"{live_server.url}/fleet/nodes/{node.pk}/")
    assert "On as last reported" in page.locator("#power-observed").inner_text()
    page.click("#node-power button[value=power_cycle]")
    page.wait_for_load_state("networkidle")
    assert f"Power cycle {node.hostname}?" in page.locator("h1").inner_text()  # it asks first
    page.fill("input[name=reason]", "hung after XID 79")
    page.click("#power-confirm button[type=submit]")
    page.wait_for_load_state("networkidle")
    assert "ForceRestart accepted by" in page.locator("#power-open").inner_text()
    # The BMC took it down; the fake driver brings it back 1-11 s later, so by now it may be on again.
    power_sync_pass(budget_s=30)
    node.refresh_from_db()
    page.reload()
    if node.power_state == "off":  # the emulator brings it back 1-11 s later: usually seen off first
        assert "Off as last reported" in page.locator("#power-observed").inner_text()
        screenshot(page, "node-power-cycling")
    assert redfish_emulator.wait_for_power(system, "On") == "On"
    power_sync_pass(budget_s=30)
    page.reload()
    assert "On as last reported" in page.locator("#power-observed").inner_text()
    assert "Observed done" in page.locator("#power-actions").inner_text()
    assert page.locator("#power-open").count() == 0
    screenshot(page, "node-power-cycled")
    assert page.console_errors == []
