"""The portal's SSH keys page and the `ssh` line per node (docs/tenancy.md, "The portal")."""

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from core.choices import TenantRole
from tenants.models import Membership, SshKey
from tenants.services.allocation_loop import run_allocation_loop

from .conftest import provision_succeeds, ready_output

pytestmark = pytest.mark.django_db


def new_key() -> str:
    key = ed25519.Ed25519PrivateKey.generate().public_key()
    return key.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()


def login(client, django_user_model, tenant, role=TenantRole.MEMBER, name="alice"):
    user = django_user_model.objects.create_user(name, password="pw-123-secret")
    Membership.objects.create(tenant=tenant, user=user, role=role)
    client.force_login(user)
    return user


def test_register_list_and_delete_after_confirming(client, django_user_model, tenant_a):
    login(client, django_user_model, tenant_a)
    line = new_key()
    assert client.post("/portal/ssh-keys/", {"name": "laptop", "public_key": line, "form_key": "f1"}).status_code == 302
    assert client.post("/portal/ssh-keys/", {"name": "laptop", "public_key": line, "form_key": "f1"}).status_code == 302
    key = SshKey.objects.get()  # the double submit registered it once
    page = client.get("/portal/ssh-keys/").content.decode()
    assert key.fingerprint in page and "laptop" in page
    dup = client.post("/portal/ssh-keys/", {"name": "again", "public_key": line, "form_key": "f2"}, follow=True)
    assert "already registered" in dup.content.decode()
    bad = client.post("/portal/ssh-keys/", {"name": "x", "public_key": "ssh-rsa AAAA", "form_key": "f3"}, follow=True)
    assert "not an OpenSSH public key" in bad.content.decode()
    confirm = client.get(f"/portal/ssh-keys/{key.pk}/delete/").content.decode()
    assert key.fingerprint in confirm and "no live allocation" in confirm
    assert SshKey.objects.exists()  # asking first changed nothing
    assert client.post(f"/portal/ssh-keys/{key.pk}/delete/").status_code == 302
    assert not SshKey.objects.exists()


def test_viewers_read_only_and_other_tenants_keys_are_404(client, django_user_model, tenant_a, tenant_b, client_b):
    login(client, django_user_model, tenant_a, role=TenantRole.VIEWER)
    theirs = client_b.post(
        "/api/v1/ssh-keys", {"name": "b", "public_key": new_key()}, format="json", HTTP_IDEMPOTENCY_KEY="b"
    ).json()["id"]
    page = client.get("/portal/ssh-keys/").content.decode()
    assert "add-ssh-key" not in page and "No SSH keys yet" in page
    assert client.post("/portal/ssh-keys/", {"name": "v", "public_key": new_key()}).status_code == 403
    client.logout()
    login(client, django_user_model, tenant_a, name="bob")
    assert client.get(f"/portal/ssh-keys/{theirs}/delete/").status_code == 404
    assert client.post(f"/portal/ssh-keys/{theirs}/delete/").status_code == 404
    assert SshKey.objects.filter(pk=theirs).exists()


def test_the_allocations_page_shows_the_ssh_line_per_ready_node(small_fleet, client, django_user_model, tenant_a):
    from fleet.models import NodeAgentAction

    login(client, django_user_model, tenant_a)
    client.post("/portal/ssh-keys/", {"name": "laptop", "public_key": new_key(), "form_key": "k"})
    client.post(
        "/portal/allocations/",
        {"name": "web", "instance_type": "h100-sxm-8x", "node_count": 1, "fabric": "isolated", "form_key": "a"},
    )
    run_allocation_loop()
    for action in NodeAgentAction.objects.filter(action="provision"):
        action.output = ready_output(action.params)
        action.save()
    provision_succeeds()
    run_allocation_loop()
    page = client.get("/portal/allocations/").content.decode()
    from tenants.models import AllocationNode

    node = AllocationNode.objects.get().node
    assert f"ssh ubuntu@{node.data_address}" in page and "active" in page and "ready" in page


def test_the_portal_request_picks_image_user_and_volumes_and_refuses_another_tenants(
    small_fleet, client, django_user_model, tenant_a, tenant_b, client_b
):
    from devtools.services.demo_software import golden_versions
    from fleet.models import NodeType
    from fleet.services.baselines import create_baseline
    from tenants.models import Allocation, StorageQuota

    node_type = NodeType.objects.get(slug="h100-sxm-8x")
    image = create_baseline(node_type=node_type, name="g", versions=golden_versions(node_type), actor="t", golden=True)
    for tenant in (tenant_a, tenant_b):
        StorageQuota.objects.update_or_create(tenant=tenant, defaults={"max_volumes": 2, "max_gb": 100})
    theirs = client_b.post(
        "/api/v1/volumes", {"name": "b", "size_gb": 1}, format="json", HTTP_IDEMPOTENCY_KEY="v"
    ).json()["id"]
    login(client, django_user_model, tenant_a)
    mine = tenant_a.volumes.create(name="data", size_gb=10)
    assert "data (10 GB)" in client.get("/portal/").content.decode()
    form = {"name": "w", "instance_type": "h100-sxm-8x", "node_count": 1, "fabric": "isolated", "user": "ml"}
    refused = client.post("/portal/allocations/", {**form, "volume_ids": [theirs], "form_key": "1"}, follow=True)
    assert "No such volume" in refused.content.decode() and not Allocation.objects.exists()
    client.post("/portal/allocations/", {**form, "volume_ids": [str(mine.pk)], "image": str(image.pk), "form_key": "2"})
    allocation = Allocation.objects.get()
    assert allocation.login_user == "ml" and allocation.image_id == image.pk
    assert list(allocation.volumes.values_list("pk", flat=True)) == [mine.pk]
