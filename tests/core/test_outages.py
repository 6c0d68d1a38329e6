"""A database or broker that is down answers 503 + Retry-After everywhere, never 500."""

import pytest
from django.db import OperationalError
from django.db.backends import utils as db_utils
from django.test import Client
from rest_framework.test import APIClient

from core.api.agent_tokens import mint_agent_token
from fleet.models import Node
from tenants.models import Tenant
from tests.tenants.conftest import tenant_client

pytestmark = pytest.mark.django_db


@pytest.fixture
def database_down(monkeypatch):
    """Every query on the control-plane database fails the way a stopped server makes it fail."""

    def refuse(self, *args, **kwargs):
        if self.db.alias == "default":
            raise OperationalError('connection to server at "127.0.0.1", port 5432 failed: Connection refused')
        return real_execute(self, *args, **kwargs)

    real_execute = db_utils.CursorWrapper.execute
    monkeypatch.setattr(db_utils.CursorWrapper, "execute", refuse)
    monkeypatch.setattr(db_utils.CursorWrapper, "executemany", refuse)


def _assert_503_problem(response):
    assert response.status_code == 503, response.content[:300]
    assert response["Retry-After"] == "5"
    assert response["Content-Type"].startswith("application/problem+json")
    body = response.json()
    assert body["code"] == "service_unavailable" and body["status"] == 503 and "Retry in 5 s" in body["detail"]


def test_tenant_ops_and_agent_apis_answer_503(small_fleet, operator_token, request):
    tenant_api = tenant_client(Tenant.objects.create(slug="acme", name="Acme"))
    node = Node.objects.first()
    ops = APIClient()
    ops.credentials(HTTP_AUTHORIZATION=f"Bearer {operator_token}")
    agent = APIClient()
    agent.credentials(HTTP_AUTHORIZATION=f"Bearer {mint_agent_token(node.pk)}")
    request.getfixturevalue("database_down")
    _assert_503_problem(tenant_api.get("/api/v1/allocations"))
    _assert_503_problem(
        tenant_api.post(
            "/api/v1/allocations",
            {"name": "x", "instance_type": "h100-sxm-8x", "node_count": 1},
            format="json",
            HTTP_IDEMPOTENCY_KEY="k",
        )
    )
    _assert_503_problem(ops.get("/api/v1/ops/nodes"))
    _assert_503_problem(agent.post("/api/agent/v1/heartbeat", {"power_state": "on", "gpus": []}, format="json"))
    _assert_503_problem(ops.get("/metrics"))


def test_console_pages_answer_a_503_page(operator_user, request):
    client = Client(raise_request_exception=False)
    client.force_login(operator_user)
    request.getfixturevalue("database_down")
    for path in ("/", "/fleet/nodes/", "/health/", "/accounts/login/"):
        response = client.get(path)
        assert response.status_code == 503, (path, response.status_code)
        assert response["Retry-After"] == "5"
        assert "Temporarily unavailable" in response.content.decode()
