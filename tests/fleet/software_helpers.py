"""Shared setup for software tests: an agent reporting its node's stack through the agent API."""

from datetime import datetime

from django.utils import timezone
from rest_framework.test import APIClient

from core.api.agent_tokens import mint_agent_token
from fleet.models import Node

# A complete, healthy Hopper HGX stack as the agent reports it.
FULL_STACK = {
    "gpu_vbios": ("96.00.89.00.01", "ok"),
    "kernel": ("6.8.0-49-generic", "ok"),
    "gpu_driver": ("570.133.20", "ok"),
    "fabric_manager": ("570.133.20", "ok"),
    "ib_stack": ("MLNX_OFED_LINUX-24.10-1.1.4.0", "ok"),
    "nvidia_peermem": ("570.133.20", "ok"),
    "cuda": ("12.8", "ok"),
    "nccl": ("2.25.1", "ok"),
    "container_toolkit": ("1.17.4", "ok"),
}


def agent_client(node: Node) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {mint_agent_token(node.pk)}")
    return client


def stamp(at: datetime | None = None) -> str:
    return (at or timezone.now()).isoformat().replace("+00:00", "Z")


def report_stack(node: Node, *, drop=(), at: datetime | None = None, **changes):
    """The node's agent reports FULL_STACK without `drop`, with `changes` (component=(version, state))."""
    stack = {**FULL_STACK, **changes}
    components = [
        {"component": name, "version": version, "state": state}
        for name, (version, state) in stack.items()
        if name not in drop
    ]
    response = agent_client(node).post(
        "/api/agent/v1/software-inventory", {"observed_at": stamp(at), "components": components}, format="json"
    )
    assert response.status_code == 202, response.content
    return response
