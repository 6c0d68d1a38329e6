"""schemathesis against the served schema for the tenant endpoints, with a tenant token:
no 5xx and no response that breaks the schema (status codes, content types, bodies, headers)."""

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from config.wsgi import application

pytestmark = pytest.mark.slow  # fuzz: schemathesis over the tenant API

TENANT_PATHS = r"^/api/v1/(instance-types|allocations|fabric-partitions|volumes|tenant)"
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    response_headers_conformance,
]


@pytest.fixture
def keep_test_connection():
    """Calls go through the real WSGI handler, whose request signals close database connections;
    the test's transaction must survive them (Django's test client does the same)."""
    from django.core.signals import request_finished, request_started
    from django.db import close_old_connections

    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture
def bearer(tenant_a, keep_test_connection):
    from core.services.tokens import create_api_token

    _, plain = create_api_token(kind="tenant", tenant=tenant_a, role="admin", actor="test")
    return {"Authorization": f"Bearer {plain}"}


# The schema view needs no database, so it is loaded at collection time.
schema = schemathesis.openapi.from_wsgi("/api/v1/schema/", application).include(path_regex=TENANT_PATHS)


@pytest.mark.django_db(databases=["default", "ledger"])
@schema.parametrize()
@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
def test_tenant_api_conforms_to_its_schema(case, small_fleet, bearer):
    case.call_and_validate(headers=bearer, checks=CHECKS)
