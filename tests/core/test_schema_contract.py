"""The served OpenAPI schema and the contract in docs/api.md describe the same endpoints."""

import json
import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs" / "api.md"
ENDPOINT = re.compile(r"^\| `(GET|POST|PUT|PATCH|DELETE) (/api/[^`?\s]+)")
# Served for people and tools, not part of an API's surface.
UNDOCUMENTED = {"/api/v1/schema", "/api/v1/docs"}


def documented_endpoints() -> dict[str, set[str]]:
    """Every `METHOD /path` that starts a row of an endpoint table in docs/api.md."""
    out: dict[str, set[str]] = {}
    for line in DOCS.read_text().splitlines():
        match = ENDPOINT.match(line)
        if match:
            out.setdefault(match.group(2), set()).add(match.group(1).lower())
    return out


CONTRACT = documented_endpoints()


@pytest.fixture(scope="module")
def schema(django_db_blocker):
    from django.test import Client

    with django_db_blocker.unblock():
        response = Client().get("/api/v1/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    return json.loads(response.content)


@pytest.mark.parametrize(("path", "methods"), sorted(CONTRACT.items()))
def test_every_contract_endpoint_is_described(schema, path, methods):
    assert path in schema["paths"], f"{path} missing from the served schema"
    assert methods <= set(schema["paths"][path])


def test_operation_ids_are_unique(schema):
    ids = [
        op["operationId"]
        for item in schema["paths"].values()
        for op in item.values()
        if isinstance(op, dict) and "operationId" in op
    ]
    assert len(ids) == len(set(ids))


def test_bearer_security_schemes_are_published(schema):
    assert {"bearerAuth", "agentToken"} <= set(schema["components"]["securitySchemes"])


def test_the_contract_lists_endpoints():
    assert len(CONTRACT) >= 30, "docs/api.md's endpoint tables were not found"


def test_every_served_endpoint_is_in_the_contract(schema):
    methods = {"get", "post", "put", "patch", "delete"}
    missing = sorted(
        f"{method.upper()} {path}"
        for path, item in schema["paths"].items()
        if path.rstrip("/") not in UNDOCUMENTED
        for method in set(item) & methods
        if method not in CONTRACT.get(path, set())
    )
    assert not missing, f"served but not in docs/api.md: {missing}"


def test_swagger_groups_every_operation_by_area(schema):
    tags = {
        (path, method): operation.get("tags", [])
        for path, item in schema["paths"].items()
        for method, operation in item.items()
        if method in ("get", "post", "put", "patch", "delete")
    }
    assert all(len(t) == 1 and t[0] in {"tenant", "ops", "agent", "billing", "planning"} for t in tags.values()), [
        key for key, t in tags.items() if len(t) != 1 or t[0] not in {"tenant", "ops", "agent", "billing", "planning"}
    ]
    assert tags[("/api/v1/ops/disposition-plans", "get")] == ["planning"]
    assert tags[("/api/v1/allocations", "post")] == ["tenant"]
    assert any(t == ["agent"] for (path, _), t in tags.items() if path.startswith("/api/agent/"))


def test_every_collection_with_a_post_has_a_get_list(schema):
    missing = [
        path
        for path, item in schema["paths"].items()
        if "post" in item and "get" not in item and "{" not in path.rsplit("/", 1)[-1] and not _is_action(path)
    ]
    assert missing == [], missing


def _is_action(path: str) -> bool:
    """A verb on one object (…/{id}/apply, /actions, /reissue), an ingest endpoint or an inbound
    hook (a paging tool's webhook), not a collection."""
    return "{" in path or path.startswith(("/api/agent/", "/api/v1/hooks/"))
