"""schemathesis against the served schema for the tenant endpoints, with a tenant token:
no 5xx and no response that breaks the schema (status codes, content types, bodies, headers)."""
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi.checks import (content_type_conformance, response_headers_conformance,
                                                response_schema_conformance, status_code_conformance)
from schemathesis.checks import not_a_server_error

from config.wsgi import application

TENANT_PATHS = r"^/api/v1/(instance-types|allocations|fabric-partitions|volumes|tenant)"
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance,
          response_headers_conformance]


@pytest.fixture
def bearer(tenant_a):
    from core.services.tokens import create_api_token

    _, plain = create_api_token(kind="tenant", tenant=tenant_a, role="admin", actor="test")
    return {"Authorization": f"Bearer {plain}"}


# The schema view needs no database, so it is loaded at collection time.
schema = schemathesis.openapi.from_wsgi("/api/v1/schema/", application).include(path_regex=TENANT_PATHS)


@pytest.mark.django_db
@schema.parametrize()
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
def test_tenant_api_conforms_to_its_schema(case, small_fleet, bearer):
    case.call_and_validate(headers=bearer, checks=CHECKS)
