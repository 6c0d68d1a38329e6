"""Console actions go through the same permission table as the API: every console route is
either a read or an action listed here (a new route must be classified, or this fails), and
each action × each staff role → allowed, or 403 naming the permission with nothing changed."""

import uuid

import pytest
from django.contrib.auth.models import Group
from django.urls import get_resolver
from django.urls.resolvers import URLResolver

from core.services.permissions import ROLE_GROUPS, permission_for
from fleet.models import Node

from .test_permission_matrix import _state

pytestmark = pytest.mark.django_db

# url name → (ops action, POST data) for every console form that changes something.
CONSOLE_ACTIONS = {
    "fleet:node-action": ("node.cordon", {"action": "cordon", "reason": "console matrix"}),
    "fleet:rollout-list": ("rollout.create", {"baseline_id": "00000000-0000-0000-0000-000000000000"}),
    "fleet:rollout-detail": ("rollout.control", {"action": "pause"}),
    "fleet:node-power": ("node.power", {"action": "power_on", "confirm": "yes", "reason": "console matrix"}),
    "planning:disposition-plan-list": ("disposition_plan.create", {"name": "x"}),
    "planning:disposition-plan-nodes": ("node.record_bmc_reset", {"action": "bmc_reset"}),
    "planning:migration-plan-create": ("migration_plan.create", {}),
    "planning:migration-plan-apply": ("migration_plan.apply", {}),
    "planning:capacity-plan-list": ("capacity_plan.create", {"name": "x"}),
    "planning:capacity-plan-to-migration": ("capacity_plan.to_migration", {}),
    "health:new-incident": ("incident.open", {"title": "x", "hostnames": "nope", "severity": "minor"}),
    "health:incident": ("incident.postmortem", {"attribution": "provider"}),
    "billing:dispute": ("dispute.resolve", {"decision": "accept"}),
    "health:incident-page": ("incident.acknowledge", {"do": "acknowledge"}),
    "core:notification-retry": ("delivery.retry", {}),
}
# Pages that only read (for staff), the tenant portal (tenant membership rules, tested in
# tests/tenants and tests/billing), sign-in, and the metrics scrape.
NOT_OPERATOR_ACTIONS = {
    "core:search",
    "core:problem-types",  # public documentation of the API's problem codes
    "core:problem-type",
    "core:notifications",
    "fleet:overview",
    "fleet:now-tiles",
    "fleet:rack-list",
    "fleet:power",
    "fleet:floor-map",
    "fleet:rack-detail",
    "fleet:chart-json",
    "fleet:metrics",
    "fleet:node-list",
    "fleet:software-drift",
    "fleet:node-detail",
    "fleet:node-certificate",
    "fleet:node-certificate-pdf",
    "planning:disposition-plan-detail",
    "planning:migration-plan-list",
    "planning:migration-plan-detail",
    "planning:migration-plan-progress",
    "planning:capacity-plan-detail",
    "health:dashboard",
    "health:policy",
    "devtools:twin",
    "tenants:tenant-list",
    "billing:disputes",
    "billing:overview",
    "billing:verification",
    "tenants:portal",
    "tenants:portal-create",
    "tenants:portal-allocations",
    "tenants:portal-tokens",
    "tenants:portal-notifications",
    "tenants:portal-cancel",
    "tenants:portal-ssh-keys",
    "tenants:portal-ssh-key-delete",
    "tenants:portal-volume-delete",
    "billing:portal-usage",
    "billing:portal-invoices",
    "billing:portal-invoice-csv",
    "billing:portal-invoice-pdf",
    "billing:portal-credit-note-pdf",
    "billing:portal-invoice",
    "login",
    "logout",
}


def _console_routes():
    def walk(patterns, namespace=""):
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                if str(pattern.pattern).startswith(("api/", "admin/")):
                    continue
                inner = f"{pattern.namespace}:" if pattern.namespace else namespace
                yield from walk(pattern.url_patterns, inner)
            elif pattern.name:
                yield f"{namespace}{pattern.name}", str(pattern.pattern)

    return dict(walk(get_resolver().url_patterns))


def test_every_console_route_is_classified():
    routes = _console_routes()
    unclassified = set(routes) - set(CONSOLE_ACTIONS) - NOT_OPERATOR_ACTIONS
    assert not unclassified, f"classify these console routes (action or read): {sorted(unclassified)}"


def _url(name: str) -> str:
    from django.urls import reverse

    node = Node.objects.order_by("hostname").first()
    route = _console_routes()[name]
    if "<" not in route:
        return reverse(name)
    pk = node.pk if name in ("fleet:node-action", "fleet:node-power") else uuid.uuid4()
    return reverse(name, kwargs={"pk": str(pk)})


STAFF_ROLES = ("superuser", "operators", "read-only", "staff-without-permissions")


@pytest.mark.parametrize("role", STAFF_ROLES)
def test_console_actions_for_every_staff_role(small_fleet, client, django_user_model, role):
    user = django_user_model.objects.create_user(
        role, password="console-pass-123", is_staff=True, is_superuser=role == "superuser"
    )
    if role in ROLE_GROUPS:
        user.groups.add(Group.objects.get(name=role))
    client.force_login(user)
    for name, (action, data) in CONSOLE_ACTIONS.items():
        allowed = role == "superuser" or action in ROLE_GROUPS.get(role, {}).get("actions", [])
        before = _state()
        response = client.post(_url(name), data)
        where = f"{role} POST {name} -> {response.status_code}"
        assert response.status_code < 500, where
        if allowed:
            assert response.status_code != 403, where
            continue
        assert response.status_code == 403, where
        assert permission_for(action) in response.content.decode(), where
        assert _state() == before, f"{where} changed something"


def test_console_cordon_refused_and_allowed_like_the_api(small_fleet, client, django_user_model):
    node = Node.objects.order_by("hostname").first()
    user = django_user_model.objects.create_user("dave", password="console-pass-123", is_staff=True)
    client.force_login(user)
    url = f"/fleet/nodes/{node.pk}/actions/"
    refused = client.post(url, {"action": "cordon"})
    assert refused.status_code == 403 and "fleet.change_node" in refused.content.decode()
    node.refresh_from_db()
    assert not node.cordoned
    user.groups.add(Group.objects.get(name="operators"))
    assert client.post(url, {"action": "cordon"}).status_code == 302
    node.refresh_from_db()
    assert node.cordoned
