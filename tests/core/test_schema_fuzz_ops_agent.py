"""schemathesis against the served schema for the operator and node-agent endpoints: whatever
the input, never a 5xx. (The tenant API, whose error answers are all documented, is also held
to full schema conformance in tests/tenants/test_schema_fuzz.py.)"""

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error

from config.wsgi import application

pytestmark = pytest.mark.slow  # fuzz: schemathesis over the operator and agent APIs

CHECKS = [not_a_server_error]

ops_schema = schemathesis.openapi.from_wsgi("/api/v1/schema/", application).include(path_regex=r"^/api/v1/ops/")
agent_schema = schemathesis.openapi.from_wsgi("/api/v1/schema/", application).include(path_regex=r"^/api/agent/v1/")


@pytest.fixture
def keep_test_connection():
    """The real WSGI handler closes connections at request end; the test's transaction must survive."""
    from django.core.signals import request_finished, request_started
    from django.db import close_old_connections

    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.mark.django_db(databases=["default", "ledger"])
@ops_schema.parametrize()
@settings(max_examples=15, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
def test_operator_api_never_fails_on_any_input(case, small_fleet, operator_token, keep_test_connection):
    case.call_and_validate(headers={"Authorization": f"Bearer {operator_token}"}, checks=CHECKS)


@pytest.mark.django_db(databases=["default", "ledger"])
@agent_schema.parametrize()
@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
def test_agent_api_never_fails_on_any_input(case, small_fleet, keep_test_connection):
    from core.api.agent_tokens import mint_agent_token
    from fleet.models import Node

    token = mint_agent_token(Node.objects.order_by("hostname").first().pk)
    case.call_and_validate(headers={"Authorization": f"Bearer {token}"}, checks=CHECKS)
