"""Billing fixtures: tenants with API clients, an agent client, and a meter-event factory."""
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from rest_framework.test import APIClient

from core.api.agent_tokens import mint_agent_token

LEDGER_DBS = ["default", "ledger"]


def rfc(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ").replace(".000000Z", "Z")


def make_event(*, tenant_id, allocation_id=None, start: datetime, seconds: int = 60, gpus: int = 8,
               sku: str = "h100-sxm-8x", event_id: str | None = None) -> dict:
    return {
        "event_id": event_id or str(uuid.uuid4()),
        "allocation_id": str(allocation_id or uuid.UUID(int=1)),
        "tenant_id": str(tenant_id),
        "sku": sku,
        "start": rfc(start),
        "end": rfc(start + timedelta(seconds=seconds)),
        "quantity": str(gpus * seconds),
        "unit": "gpu_second",
    }


@pytest.fixture
def tenants(db):
    from tenants.models import Tenant

    return Tenant.objects.create(slug="acme", name="Acme"), Tenant.objects.create(slug="globex", name="Globex")


def _tenant_client(tenant, role="viewer"):
    from core.services.tokens import create_api_token

    _, plain = create_api_token(kind="tenant", tenant=tenant, role=role, actor="test")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {plain}")
    return client


@pytest.fixture
def acme_api(tenants):
    return _tenant_client(tenants[0])


@pytest.fixture
def globex_api(tenants):
    return _tenant_client(tenants[1])


@pytest.fixture
def node_id():
    return uuid.uuid4()


@pytest.fixture
def agent_api(node_id):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {mint_agent_token(node_id)}")
    return client


@pytest.fixture
def ingest(node_id):
    """Store events through the ingest service (as the endpoint does), in batches of 1000."""
    from billing.services.ingest import ingest_meter_events

    def run(events):
        accepted = duplicates = 0
        for i in range(0, len(events), 1000):
            result = ingest_meter_events(node_id=node_id, events=events[i:i + 1000])
            accepted, duplicates = accepted + result.accepted, duplicates + result.duplicates
        return accepted, duplicates

    return run
