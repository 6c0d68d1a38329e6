"""Abuse limits, each as the attacker's request and the refusal: bodies too deep or too large,
malformed JSON. (Throttles, login lockout, CSV formulas and storage quotas have their own
files next to the code they guard.)"""

import json

import pytest
from django.test import Client

from core.api.agent_tokens import mint_agent_token
from core.models import AuditEvent
from core.services.tokens import create_api_token
from fleet.models import Node
from tenants.models import Allocation, Tenant

pytestmark = pytest.mark.django_db

PROBLEM = "application/problem+json"


@pytest.fixture
def tenant_token(db):
    tenant = Tenant.objects.create(slug="attacked", name="Attacked")
    return create_api_token(kind="tenant", tenant=tenant, role="admin", actor="test")[1]


def _post(path: str, raw: bytes | str, token: str, **headers):
    return Client().generic(
        "POST", path, raw, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}", **headers
    )


DEEP_BODIES = {
    "list nested 100,000 deep": "[" * 100_000 + "]" * 100_000,
    "object nested 100,000 deep": '{"a":' * 100_000 + "1" + "}" * 100_000,
    "nested 40 deep inside a valid field": json.dumps(
        {"instance_type": "h100-sxm-8x", "count": 1, "labels": json.loads("[" * 40 + "]" * 40)}
    ),
}


@pytest.mark.parametrize("name", DEEP_BODIES)
def test_deeply_nested_json_is_a_400_problem(tenant_token, name):
    response = _post("/api/v1/allocations", DEEP_BODIES[name], tenant_token, HTTP_IDEMPOTENCY_KEY="deep")
    assert response.status_code == 400
    assert response.headers["Content-Type"] == PROBLEM
    assert response.json()["code"] == "parse_error" and "nested too deeply" in response.json()["detail"]
    assert not Allocation.objects.exists()


@pytest.mark.parametrize("raw", ["{", '{"a": }', "\udcff", "[1, 2", "NaN-ish", '{"a": 1e999999}x'])
def test_malformed_json_is_a_400_problem(tenant_token, raw):
    response = _post(
        "/api/v1/allocations", raw.encode("utf-8", "surrogatepass"), tenant_token, HTTP_IDEMPOTENCY_KEY="bad"
    )
    assert response.status_code == 400
    assert response.headers["Content-Type"] == PROBLEM


def test_deep_json_on_the_agent_and_ops_routes_too(small_fleet, operator_token):
    node = Node.objects.order_by("hostname").first()
    deep = "[" * 100_000 + "]" * 100_000
    agent = _post("/api/agent/v1/meter-events", deep, mint_agent_token(node.pk))
    ops = _post(f"/api/v1/ops/nodes/{node.pk}/actions", deep, operator_token, HTTP_IDEMPOTENCY_KEY="deep")
    assert (agent.status_code, ops.status_code) == (400, 400)
    assert agent.headers["Content-Type"] == ops.headers["Content-Type"] == PROBLEM


def test_oversized_body_is_a_413_problem_before_anything_reads_it(tenant_token, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10_000
    audits = AuditEvent.objects.count()
    body = json.dumps({"instance_type": "h100-sxm-8x", "count": 1, "padding": "x" * 20_000})
    response = _post("/api/v1/allocations", body, tenant_token, HTTP_IDEMPOTENCY_KEY="big")
    assert response.status_code == 413
    assert response.headers["Content-Type"] == PROBLEM
    assert response.json()["code"] == "payload_too_large" and response.json()["limit_bytes"] == 10_000
    assert not Allocation.objects.exists() and AuditEvent.objects.count() == audits


def test_oversized_body_to_a_console_page_is_413_too(settings, client):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1_000
    response = client.post("/accounts/login/", {"username": "x" * 5_000, "password": "y"})
    assert response.status_code == 413


def test_the_default_limit_fits_the_largest_legitimate_body(settings):
    from billing.services.ingest import MAX_BATCH

    assert settings.DATA_UPLOAD_MAX_MEMORY_SIZE >= 200_000 * 38  # a disposition plan of 200,000 node ids
    assert settings.DATA_UPLOAD_MAX_MEMORY_SIZE >= MAX_BATCH * 2_000  # a full meter batch, with grants


NUL_BODIES = {
    "a NUL in a small body": '{"instance_type": "h100-sxm-8x", "count": 1, "labels": {"a": "x\\u0000"}}',
    "a NUL in a key": '{"instance_type": "h100-sxm-8x", "count": 1, "labels": {"\\u0000": "x"}}',
    "a NUL in a body with more openers than the depth limit": json.dumps(
        {"instance_type": "h100-sxm-8x", "count": 1, "labels": {f"k{i}": [] for i in range(40)} | {"z": "\x00"}}
    ),
}


@pytest.mark.parametrize("name", NUL_BODIES)
def test_nul_characters_are_a_400_problem_whatever_the_body_shape(tenant_token, name):
    response = _post("/api/v1/allocations", NUL_BODIES[name], tenant_token, HTTP_IDEMPOTENCY_KEY="nul")
    assert response.status_code == 400 and response.json()["code"] == "validation_error"
    assert "NUL" in response.json()["detail"]
    assert not Allocation.objects.exists()


def _nested(levels: int) -> str:
    """A valid allocation whose labels nest so that the whole body is `levels` deep."""
    return json.dumps(
        {"instance_type": "h100-sxm-8x", "count": 1, "labels": json.loads("[" * (levels - 1) + "]" * (levels - 1))}
    )


def test_the_depth_limit_is_exact_around_the_text_shortcut(tenant_token, settings):
    at_limit = _post(
        "/api/v1/allocations", _nested(settings.API_MAX_JSON_DEPTH), tenant_token, HTTP_IDEMPOTENCY_KEY="d1"
    )
    assert "nested too deeply" not in at_limit.content.decode()
    over = _post(
        "/api/v1/allocations", _nested(settings.API_MAX_JSON_DEPTH + 1), tenant_token, HTTP_IDEMPOTENCY_KEY="d2"
    )
    assert over.status_code == 400 and "nested too deeply" in over.json()["detail"]
    # Braces inside strings only make the shortcut walk the body; they are not nesting.
    braces = json.dumps({"instance_type": "h100-sxm-8x", "count": 1, "labels": {"note": "{[" * 50}})
    shallow = _post("/api/v1/allocations", braces, tenant_token, HTTP_IDEMPOTENCY_KEY="d3")
    assert "nested too deeply" not in shallow.content.decode()
