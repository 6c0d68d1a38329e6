"""Shared setup for lifecycle tests: put nodes in a state, give one a live allocation."""

import uuid
from datetime import timedelta

from django.utils import timezone

from fleet.models import Node
from fleet.services.lifecycle import STATE_TIMEOUTS


def place(node: Node, state: str, *, entered_ago: timedelta = timedelta(0), **fields) -> Node:
    """Test setup only: place the node in `state` as if it entered it `entered_ago`."""
    timeout = STATE_TIMEOUTS.get(state)
    entered = timezone.now() - entered_ago
    deadline = entered + timeout if timeout else None
    Node.objects.filter(pk=node.pk).update(lifecycle=state, state_deadline=deadline, state_entered_at=entered, **fields)
    node.refresh_from_db()
    return node


def allocate(node: Node):
    from tenants.models import Allocation, AllocationNode, Tenant

    tenant, _ = Tenant.objects.get_or_create(slug="acme", defaults={"name": "Acme"})
    allocation = Allocation.objects.create(
        tenant=tenant, name="job", instance_type=node.node_type, node_count=1, state="active"
    )
    return AllocationNode.objects.create(allocation=allocation, node=node, started_at=timezone.now())


def report_drives(node: Node, drives: list[dict] | None = None, *, purge_supported: bool = True):
    """The node's agent reports the drives it sees (default: exactly its Drive rows) through the
    agent API's health report, as a real agent does."""
    from rest_framework.test import APIClient

    from core.api.agent_tokens import mint_agent_token

    if drives is None:
        drives = [
            {
                "serial": d.serial,
                "model": d.model,
                "capacity_gb": d.capacity_gb,
                "self_encrypting": d.self_encrypting,
                "purge_supported": purge_supported or d.self_encrypting,
            }
            for d in node.drives.filter(missing_since__isnull=True).order_by("serial")
        ]
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {mint_agent_token(node.pk)}")
    body = {"observed_at": timezone.now().isoformat().replace("+00:00", "Z"), "checks": [], "drives": drives}
    response = client.post("/api/agent/v1/health-reports", body, format="json")
    assert response.status_code == 202, response.content
    return response


def pass_drive_gate(node: Node, method: str = "purge") -> None:
    """Setup: the agent reports the drives and each gets a verified record with evidence."""
    from fleet.services.sanitization import record_sanitization

    report_drives(node)
    for drive in node.drives.all():
        record_sanitization(
            drive=drive,
            method=method,
            technique="NVMe sanitize crypto erase",
            tool="nvme-cli 2.8",
            verified=True,
            evidence="sanitize log SSTAT=0x101; sampled read-back all zero",
            actor="user:op",
        )


EVIDENCE = "nvme sanitize: SSTAT=0x101 completed; read-back of 64 sampled blocks (start, end, random) all zero"


def act(ops_api, node: Node, action: str, reason: str = "exit test"):
    """Run an operator action on the node through the ops API."""
    return ops_api.post(
        f"/api/v1/ops/nodes/{node.pk}/actions",
        {"action": action, "reason": reason},
        format="json",
        HTTP_IDEMPOTENCY_KEY=str(uuid.uuid4()),
    )


def record(ops_api, drive, method: str, evidence: str = EVIDENCE, verified: bool = True):
    """Record a drive's sanitisation through the ops API, as an operator does."""
    return ops_api.post(
        f"/api/v1/ops/drives/{drive.pk}/sanitization-records",
        {
            "method": method,
            "technique": f"{method} technique",
            "tool": "nvme-cli 2.8",
            "verified": verified,
            "evidence": evidence,
        },
        format="json",
        HTTP_IDEMPOTENCY_KEY=str(uuid.uuid4()),
    )
