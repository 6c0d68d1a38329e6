"""Every operator API route × every kind of caller → the expected status, and nothing changed
by a refused request.

Routes are enumerated from the URL resolver, so a route added later is in the matrix without
editing this file; a write that declares no permission is refused even to a superuser and
fails here. Expectations come from the permission table (core.services.permissions), which
docs/permissions.md shows.
"""

import re
import uuid

import pytest
from django.apps import apps
from django.contrib.auth.models import Group
from django.urls import get_resolver
from django.urls.resolvers import URLResolver
from rest_framework.test import APIClient

from core.api.agent_tokens import mint_agent_token
from core.services.permissions import OPS_ACTIONS, PROJECT_APPS, ROLE_GROUPS, permission_for
from core.services.tokens import create_api_token
from fleet.models import Drive, Node
from tenants.models import Tenant

pytestmark = pytest.mark.django_db

OPS_PREFIX = "api/v1/ops/"
WRITE_METHODS = ("post", "put", "patch", "delete")
ROLES = (
    "superuser",
    "operators",
    "billing-admins",
    "read-only",
    "staff-without-permissions",
    "tenant-token",
    "agent-token",
)
# A body that the allowed callers' request can act on; other writes get {} (a 400 once allowed).
BODIES = {"ops-node-actions": {"action": "cordon", "reason": "permission matrix"}}


def _walk(patterns, prefix=""):
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            yield from _walk(pattern.url_patterns, prefix + str(pattern.pattern))
        else:
            yield prefix + str(pattern.pattern), pattern


def ops_routes() -> list[tuple[str, str, str, type]]:
    """(url name, path template, method, view class) of every /api/v1/ops/ route."""
    found = []
    for route, pattern in _walk(get_resolver().url_patterns):
        if not route.startswith(OPS_PREFIX):
            continue
        view = getattr(pattern.callback, "cls", None) or pattern.callback.view_class
        template = re.sub(r"\(\?P<(\w+)>[^)]*\)", r"{\1}", route).replace("^", "").replace("/?$", "").replace("$", "")
        for method in ("get", *WRITE_METHODS):
            if hasattr(view, method):
                found.append((pattern.name, "/" + template, method, view))
    return found


ROUTES = ops_routes()


def test_the_matrix_covers_every_ops_route():
    names = {name for name, *_ in ROUTES}
    assert {"ops-node-actions", "ops-node-list", "billing-runs", "ops-incident-list"} <= names
    assert len([r for r in ROUTES if r[2] != "get"]) >= 9  # the writes known today, at least


def _token_client(plain: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {plain}")
    return client


def _staff(django_user_model, username, *, group=None, superuser=False):
    user = django_user_model.objects.create_user(
        username, password="matrix-pass-123", is_staff=True, is_superuser=superuser
    )
    if group:
        user.groups.add(Group.objects.get(name=group))
    return user


@pytest.fixture
def callers(small_fleet, django_user_model):
    node = Node.objects.order_by("hostname").first()
    clients = {}
    for role in ("superuser", "operators", "billing-admins", "read-only", "staff-without-permissions"):
        user = _staff(
            django_user_model, role, group=role if role in ROLE_GROUPS else None, superuser=role == "superuser"
        )
        clients[role] = _token_client(create_api_token(kind="operator", user=user, actor="test")[1])
    tenant = Tenant.objects.create(slug="matrix", name="Matrix")
    clients["tenant-token"] = _token_client(
        create_api_token(kind="tenant", tenant=tenant, role="admin", actor="test")[1]
    )
    clients["agent-token"] = _token_client(mint_agent_token(node.pk))
    return clients


def _path(template: str) -> str:
    node = Node.objects.order_by("hostname").first()
    drive = Drive.objects.filter(node=node).first()
    if template.startswith(f"/{OPS_PREFIX}nodes/"):
        return template.replace("{pk}", str(node.pk))
    if template.startswith(f"/{OPS_PREFIX}drives/"):
        return template.replace("{pk}", str(drive.pk if drive else uuid.uuid4()))
    return template.replace("{pk}", str(uuid.uuid4()))


def _write_action(name, view, body) -> str:
    if hasattr(view, "ops_action_for"):
        return f"node.{body['action']}"
    return getattr(view, "ops_action", None)


def _may(role: str, action: str) -> bool:
    if role == "superuser":
        return True
    role_permissions = {permission_for(a) for a in ROLE_GROUPS.get(role, {}).get("actions", [])}
    return permission_for(action) in role_permissions


def _state() -> dict:
    """Every row count of the project's models (both databases) and every node's flags."""
    counts = {m._meta.label: m.objects.count() for m in apps.get_models() if m._meta.app_label in PROJECT_APPS}
    nodes = list(Node.objects.order_by("pk").values_list("pk", "lifecycle", "cordoned", "updated_at"))
    return {"counts": counts, "nodes": nodes}


@pytest.mark.parametrize("role", ROLES)
def test_every_ops_route_for_every_caller(callers, role):
    client = callers[role]
    for name, template, method, view in ROUTES:
        path = _path(template)
        body = BODIES.get(name, {})
        before = _state() if method != "get" else None
        response = getattr(client, method)(path, body, format="json", HTTP_IDEMPOTENCY_KEY=f"{role}-{name}")
        where = f"{role} {method.upper()} {path} -> {response.status_code}"
        assert response.status_code < 500, where
        if role in ("tenant-token", "agent-token"):
            assert response.status_code == 403, where
            assert response.headers["Content-Type"] == "application/problem+json", where
        elif method == "get":
            assert response.status_code in (200, 404), where  # reads: any staff account
        else:
            action = _write_action(name, view, body)
            assert action in OPS_ACTIONS, f"{name} declares no action of the permission table"
            if _may(role, action):
                assert response.status_code not in (401, 403), where
                if name in BODIES:
                    assert response.status_code == 202, where
                continue
            problem = response.json()
            assert response.status_code == 403, where
            assert response.headers["Content-Type"] == "application/problem+json", where
            assert problem["code"] == "permission_denied" and problem["permission"] == permission_for(action), where
            assert problem["permission"] in problem["detail"], where
        if before is not None:
            assert _state() == before, f"{where} changed something"


def test_every_write_view_declares_an_action_in_the_table():
    for name, _, method, view in ROUTES:
        if method == "get":
            continue
        if hasattr(view, "ops_action_for"):
            continue  # the action comes from the body; checked per action below
        assert view.ops_action in OPS_ACTIONS, f"{name} {method}"


def test_every_permission_of_the_table_exists_and_the_groups_hold_it():
    from django.contrib.auth.models import Permission

    for action in OPS_ACTIONS.values():
        app_label, codename = action.permission.split(".")
        assert Permission.objects.filter(content_type__app_label=app_label, codename=codename).exists(), action
    for group, role in ROLE_GROUPS.items():
        held = {
            f"{p.content_type.app_label}.{p.codename}"
            for p in Group.objects.get(name=group).permissions.select_related("content_type")
        }
        assert {permission_for(a) for a in role["actions"]} <= held, group
    read_only = Group.objects.get(name="read-only").permissions.all()
    assert read_only.exists() and all(p.codename.startswith("view_") for p in read_only)


# ---- the attack from the issue, as the attacker sent it ------------------------------------------


@pytest.mark.parametrize("action", ["cordon", "decommission", "drain", "validate"])
def test_staff_without_permissions_cannot_act_on_nodes_through_the_api(small_fleet, django_user_model, action):
    node = Node.objects.order_by("hostname").first()
    staff = _staff(django_user_model, "mallory")
    client = _token_client(create_api_token(kind="operator", user=staff, actor="test")[1])
    before = _state()
    response = client.post(
        f"/api/v1/ops/nodes/{node.pk}/actions", {"action": action}, format="json", HTTP_IDEMPOTENCY_KEY="attack"
    )
    assert response.status_code == 403
    assert response.json()["permission"] == permission_for(f"node.{action}")
    assert _state() == before


def test_an_operator_token_keeps_the_rights_it_was_issued_with_and_never_gains_the_users_later_ones(
    small_fleet, django_user_model
):
    """The attack: a token issued for a staff user without permissions kept working after the
    user was promoted, with the superuser's rights. A token's scope is what its user held at
    issue; it loses what the user loses, and never gains what the user is given later."""
    node = Node.objects.order_by("hostname").first()
    user = _staff(django_user_model, "carol")
    client = _token_client(create_api_token(kind="operator", user=user, actor="test")[1])
    url = f"/api/v1/ops/nodes/{node.pk}/actions"
    assert client.post(url, {"action": "cordon"}, format="json", HTTP_IDEMPOTENCY_KEY="1").status_code == 403
    user.groups.add(Group.objects.get(name="operators"))
    user.is_superuser = True
    user.save()
    refused = client.post(url, {"action": "cordon"}, format="json", HTTP_IDEMPOTENCY_KEY="2")
    assert refused.status_code == 403 and refused.json()["permission"] == "fleet.change_node"
    node.refresh_from_db()
    assert not node.cordoned
    # a token issued now carries the new rights ...
    user = django_user_model.objects.get(pk=user.pk)
    fresh = _token_client(create_api_token(kind="operator", user=user, actor="test")[1])
    assert fresh.post(url, {"action": "cordon"}, format="json", HTTP_IDEMPOTENCY_KEY="3").status_code == 202
    # ... and loses them with the user
    user.groups.clear()
    user.is_superuser = False
    user.save()
    assert fresh.post(url, {"action": "uncordon"}, format="json", HTTP_IDEMPOTENCY_KEY="4").status_code == 403


def test_billing_admins_run_billing_but_operators_do_not(small_fleet, django_user_model):
    for group, allowed in (("billing-admins", True), ("operators", False)):
        user = _staff(django_user_model, group, group=group)
        client = _token_client(create_api_token(kind="operator", user=user, actor="test")[1])
        response = client.post(
            "/api/v1/ops/billing-runs",
            {"period": "2026-01", "finalize": False},
            format="json",
            HTTP_IDEMPOTENCY_KEY=group,
        )
        assert (response.status_code != 403) is allowed, (group, response.status_code)


def test_docs_table_is_the_permission_table():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "permissions.md").read_text()
    rows = re.findall(r"^\| `([a-z_.]+)` \| [^|]+ \| `([a-z_.]+)` \| ([a-z, -]*) \|", text, flags=re.M)
    documented = {action: (permission, group.strip()) for action, permission, group in rows}
    expected = {
        name: (a.permission, ", ".join(g for g, r in ROLE_GROUPS.items() if name in r["actions"]))
        for name, a in OPS_ACTIONS.items()
    }
    assert documented == expected
