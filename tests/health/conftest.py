"""Health test helpers: agent clients for seeded nodes and agent payload builders."""

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from core.api.agent_tokens import mint_agent_token
from tests.receivers import smtp_server, webhook_receiver  # noqa: F401 (fixtures: real webhook and SMTP receivers)
from tests.redfish import emulated_system, redfish_emulator  # noqa: F401 (fixtures: a real Redfish BMC)


def gpu(index: int, **fields) -> dict:
    base = {
        "index": index,
        "uuid": f"GPU-{index:08d}",
        "temperature_c": 55,
        "power_w": 400,
        "utilization_pct": 10,
        "memory_used_mb": 1000,
        "ecc_sbe": 0,
        "ecc_dbe": 0,
        "retired_pages": 0,
        "row_remap_pending": 0,
        "row_remap_failed": 0,
        "xid_errors": [],
        "nvlink_down": 0,
    }
    base.update(fields)
    return base


def heartbeat_body(gpus: int = 8, faults: dict | None = None) -> dict:
    """`faults` = {gpu_index: {field: value}}."""
    faults = faults or {}
    return {
        "observed_at": timezone.now().isoformat().replace("+00:00", "Z"),
        "power_state": "on",
        "agent_version": "test",
        "gpus": [gpu(i, **faults.get(i, {})) for i in range(gpus)],
    }


class Agent:
    def __init__(self, node):
        self.node = node
        self.client = APIClient()
        self.client.credentials(HTTP_AUTHORIZATION=f"Bearer {mint_agent_token(node.pk)}")

    def heartbeat(self, gpus: int = 8, faults: dict | None = None, body: dict | None = None):
        return self.client.post(
            "/api/agent/v1/heartbeat", body if body is not None else heartbeat_body(gpus, faults), format="json"
        )

    def report(self, **checks):
        body = {
            "observed_at": timezone.now().isoformat().replace("+00:00", "Z"),
            "checks": [{"name": name, "status": status, "detail": ""} for name, status in checks.items()],
        }
        return self.client.post("/api/agent/v1/health-reports", body, format="json")


@pytest.fixture
def nodes(small_fleet):
    from fleet.models import Node

    return list(Node.objects.select_related("node_type").order_by("hostname"))


@pytest.fixture
def agent_for():
    return Agent
