"""docs/api.md documents the planning request bodies field by field: every field the served schema takes
is listed, and every quoted name in the documented body is a field or a value the schema knows."""

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs" / "api.md"


def _documented(path: str) -> set[str]:
    row = next(line for line in DOCS.read_text().splitlines() if line.startswith(f"| `POST {path}` |"))
    body = re.search(r"Body.*?`(\{[^`]*)`", row)
    assert body, f"docs/api.md does not give the body of POST {path}"
    return set(re.findall(r'"([A-Za-z0-9_]+)"', body.group(1)))


def _schema_names(schema: dict, component: str) -> tuple[set[str], set[str]]:
    """(property names, enum values) of a request component and every component it refers to."""
    names, values, seen = set(), set(), set()

    def walk(node):
        if isinstance(node, dict):
            ref = node.get("$ref")
            if ref and ref not in seen:
                seen.add(ref)
                walk(schema["components"]["schemas"][ref.rsplit("/", 1)[-1]])
            names.update(node.get("properties", {}))
            values.update(str(v) for v in node.get("enum", []) if v is not None)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema["components"]["schemas"][component])
    return names, values


@pytest.mark.parametrize(
    ("path", "component"),
    [
        ("/api/v1/ops/capacity-plans", "CapacityPlanInRequest"),
        ("/api/v1/ops/migration-plans", "PlanParametersRequest"),
    ],
)
def test_documented_bodies_match_the_served_schema(api, db, path, component):
    schema = api.get("/api/v1/schema/", HTTP_ACCEPT="application/json").json()
    names, values = _schema_names(schema, component)
    documented = _documented(path)
    assert names <= documented, f"served but not documented for POST {path}: {sorted(names - documented)}"
    assert documented <= names | values, (
        f"documented but not served for POST {path}: {sorted(documented - names - values)}"
    )
