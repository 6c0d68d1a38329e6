"""The served OpenAPI schema describes every endpoint of the contract (API.md), as written there."""
import pytest

CONTRACT = {
    "/api/v1/instance-types": {"get"},
    "/api/v1/allocations": {"get", "post"},
    "/api/v1/allocations/{id}": {"get"},
    "/api/v1/allocations/{id}/cancel": {"post"},
    "/api/v1/fabric-partitions": {"get", "post"},
    "/api/v1/fabric-partitions/{id}": {"get"},
    "/api/v1/volumes": {"get", "post"},
    "/api/v1/volumes/{id}": {"get"},
    "/api/v1/tenant": {"get"},
    "/api/v1/usage": {"get"},
    "/api/v1/invoices": {"get"},
    "/api/v1/invoices/{id}": {"get"},
    "/api/v1/invoices/{id}.csv": {"get"},
    "/api/agent/v1/heartbeat": {"post"},
    "/api/agent/v1/health-reports": {"post"},
    "/api/agent/v1/meter-events": {"post"},
    "/api/agent/v1/desired-state": {"get"},
    "/api/agent/v1/action-results": {"post"},
    "/api/v1/ops/nodes": {"get"},
    "/api/v1/ops/nodes/{id}": {"get"},
    "/api/v1/ops/nodes/{id}/actions": {"post"},
    "/api/v1/ops/nodes/{id}/events": {"get"},
    "/api/v1/ops/drives/{id}/sanitization-records": {"post"},
    "/api/v1/ops/incidents": {"get"},
    "/api/v1/ops/incidents/{id}": {"get"},
    "/api/v1/ops/migration-plans": {"post"},
    "/api/v1/ops/migration-plans/{id}": {"get"},
    "/api/v1/ops/disposition-plans": {"post"},
    "/api/v1/ops/disposition-plans/{id}": {"get"},
    "/api/v1/ops/billing-runs": {"post"},
}


@pytest.fixture(scope="module")
def schema(django_db_blocker):
    from django.test import Client

    with django_db_blocker.unblock():
        response = Client().get("/api/v1/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    import json

    return json.loads(response.content)


@pytest.mark.parametrize(("path", "methods"), sorted(CONTRACT.items()))
def test_every_contract_endpoint_is_described(schema, path, methods):
    assert path in schema["paths"], f"{path} missing from the served schema"
    assert methods <= set(schema["paths"][path])


def test_operation_ids_are_unique(schema):
    ids = [op["operationId"] for item in schema["paths"].values() for op in item.values() if isinstance(op, dict)
           and "operationId" in op]
    assert len(ids) == len(set(ids))


def test_bearer_security_schemes_are_published(schema):
    assert {"bearerAuth", "agentToken"} <= set(schema["components"]["securitySchemes"])
