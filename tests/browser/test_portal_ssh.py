"""A tenant registers an SSH key in the portal with headless Chromium and sees the `ssh` line of
each node of an active allocation (issue 46's browser check)."""

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_register_a_key_and_see_the_ssh_line(page, live_server, login, screenshot, django_user_model):
    from core.choices import TenantRole
    from devtools.services.fleet_seed import seed_fleet
    from fleet.models import NodeAgentAction
    from tenants.models import AllocationNode, Membership, SshKey
    from tenants.services.allocation_loop import run_allocation_loop
    from tenants.services.allocations import create_allocation
    from tenants.services.tenants import create_tenant
    from tests.tenants.conftest import provision_succeeds, ready_output

    seed_fleet(gpus=64)
    tenant = create_tenant(slug="acme", name="Acme", max_nodes=8, actor="test")[0]
    user = django_user_model.objects.create_user("ml", password="ml-pass-12345")
    Membership.objects.create(tenant=tenant, user=user, role=TenantRole.MEMBER)
    line = (
        ed25519.Ed25519PrivateKey.generate()
        .public_key()
        .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        .decode()
    )

    login(page, "ml", "ml-pass-12345")
    page.goto(f"{live_server.url}/portal/ssh-keys/")
    page.fill("#add-ssh-key input[name=name]", "laptop")
    page.fill("#add-ssh-key textarea[name=public_key]", f"{line} ml@laptop")
    page.click("#add-ssh-key button[type=submit]")
    page.wait_for_load_state("networkidle")
    key = SshKey.objects.get(tenant=tenant)
    assert key.fingerprint in page.locator("#ssh-keys").inner_text()
    screenshot(page, "portal-ssh-keys")

    from fleet.models import NodeType

    create_allocation(
        tenant=tenant,
        name="train",
        instance_type=NodeType.objects.get(slug="h100-sxm-8x"),
        node_count=2,
        fabric="isolated",
        actor="test",
    )
    run_allocation_loop()
    for action in NodeAgentAction.objects.filter(action="provision"):
        action.output = ready_output(action.params)
        action.save()
    provision_succeeds()
    run_allocation_loop()
    page.goto(f"{live_server.url}/portal/allocations/")
    table = page.locator("#allocations").inner_text()
    assert "active" in table
    for member in AllocationNode.objects.select_related("node"):
        assert f"ssh ubuntu@{member.node.data_address}" in table
    screenshot(page, "portal-ssh-lines")
