"""Tenancy fixtures: two tenants with tokens, and helpers that play the node agent's part."""

import pytest
from rest_framework.test import APIClient

from core.services.tokens import create_api_token
from fleet.choices import AgentAction, AgentActionState, Lifecycle
from fleet.models import Node, NodeAgentAction
from fleet.services.lifecycle import transition_many
from tenants.services.tenants import create_tenant
from tests.receivers import smtp_server, webhook_receiver  # noqa: F401 (fixtures: real webhook and SMTP receivers)


def tenant_client(tenant, role="member"):
    _, plain = create_api_token(kind="tenant", tenant=tenant, role=role, actor="test")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {plain}")
    return client


@pytest.fixture
def tenant_a(db):
    return create_tenant(slug="acme", name="Acme", max_nodes=64, actor="test")[0]


@pytest.fixture
def tenant_b(db):
    return create_tenant(slug="globex", name="Globex", max_nodes=64, actor="test")[0]


@pytest.fixture
def client_a(tenant_a):
    return tenant_client(tenant_a)


@pytest.fixture
def client_b(tenant_b):
    return tenant_client(tenant_b)


def ready_output(params: dict) -> dict:
    """What an agent reports when it delivered an allocation's access (hangar_agent.access)."""
    access = params.get("access") or {}
    return {
        "ready": True,
        "access": {
            "allocation_id": params.get("allocation_id"),
            "revision": access.get("revision") or params.get("revision"),
        },
        "facts": {"authorized_keys": [k["fingerprint"] for k in access.get("keys", [])], "simulated": True},
    }


def agent_confirms(action: str, to_states: list[str]) -> int:
    """What the node agents plus the reconciler do: mark pending `action`s succeeded and move
    those nodes through `to_states` with the lifecycle table."""
    pending = NodeAgentAction.objects.filter(action=action, state=AgentActionState.PENDING)
    node_ids = list(pending.values_list("node_id", flat=True))
    pending.update(state=AgentActionState.SUCCEEDED)
    for state in to_states:
        transition_many(list(Node.objects.filter(pk__in=node_ids)), state, actor="test:reconciler", action=action)
    return len(node_ids)


def provision_succeeds() -> int:
    return agent_confirms(AgentAction.PROVISION, [Lifecycle.ACTIVE])


def stop_and_wipe_succeed() -> int:
    return agent_confirms(AgentAction.STOP, [Lifecycle.WIPING, Lifecycle.AVAILABLE])
