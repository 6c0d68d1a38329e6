"""The header search box in headless Chromium: "/" focuses it from any console page, a pasted
GPU UUID (as an XID line prints it) opens that GPU's node in one step, a prefix lists hits."""

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_slash_focuses_the_box_and_a_gpu_uuid_opens_its_node(page, live_server, login, screenshot, django_user_model):
    from devtools.services.fleet_seed import seed_fleet
    from fleet.models import GPU

    seed_fleet(gpus=64)
    django_user_model.objects.create_user("alice", password="s3cret-pass", is_staff=True)
    gpu = GPU.objects.select_related("node").order_by("node__hostname", "index").last()
    login(page, "alice", "s3cret-pass")
    page.goto(f"{live_server.url}/fleet/")
    page.keyboard.press("/")
    assert page.evaluate("document.activeElement.id") == "search-box"
    page.keyboard.type(gpu.uuid)
    with page.expect_navigation():
        page.keyboard.press("Enter")
    assert page.url.endswith(f"/fleet/nodes/{gpu.node_id}/")
    assert gpu.node.hostname in page.inner_text("body")
    screenshot(page, "search-gpu-opens-node")

    page.fill("#search-box", gpu.node.hostname[:-2])
    with page.expect_navigation():
        page.press("#search-box", "Enter")
    assert "/search/?q=" in page.url and page.locator("section.search-group").count() >= 1
    screenshot(page, "search-results")
    assert page.console_errors == []
