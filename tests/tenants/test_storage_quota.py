"""Storage quotas: a tenant cannot fill the storage system with volumes (count) or size (GB)."""

import pytest

from core.models import AuditEvent
from tenants.models import StorageQuota, Tenant, Volume
from tenants.services.tenants import DEFAULT_MAX_STORAGE_GB, DEFAULT_MAX_VOLUMES, create_tenant

from .conftest import tenant_client

pytestmark = pytest.mark.django_db


def _create(client, key, size_gb, name="data"):
    return client.post("/api/v1/volumes", {"name": name, "size_gb": size_gb}, format="json", HTTP_IDEMPOTENCY_KEY=key)


def test_a_new_tenant_gets_the_default_storage_quota(tenant_a):
    assert (tenant_a.storage_quota.max_volumes, tenant_a.storage_quota.max_gb) == (
        DEFAULT_MAX_VOLUMES,
        DEFAULT_MAX_STORAGE_GB,
    )


def test_one_huge_volume_over_the_gb_quota_is_403(tenant_a, client_a):
    before = AuditEvent.objects.count()
    response = _create(client_a, "huge", 1_000_000)  # the serializer's maximum, 10x the default quota
    assert response.status_code == 403
    assert response.headers["Content-Type"] == "application/problem+json"
    body = response.json()
    assert body["code"] == "quota_exceeded" and f"{DEFAULT_MAX_STORAGE_GB} GB" in body["detail"]
    assert body["quota"] == {"max_gb": DEFAULT_MAX_STORAGE_GB, "gb": 0}
    assert not Volume.objects.exists() and AuditEvent.objects.count() == before


def test_many_small_volumes_stop_at_the_count_quota(tenant_a, client_a):
    create_tenant(slug=tenant_a.slug, name=tenant_a.name, max_nodes=64, actor="test", max_volumes=3)
    statuses = [_create(client_a, f"k{i}", 1, name=f"v{i}").status_code for i in range(5)]
    assert statuses == [201, 201, 201, 403, 403]
    assert Volume.objects.filter(tenant=tenant_a).count() == 3


def test_the_gb_quota_counts_what_is_already_held(tenant_a, client_a):
    create_tenant(slug=tenant_a.slug, name=tenant_a.name, max_nodes=64, actor="test", max_storage_gb=100)
    assert _create(client_a, "a", 60).status_code == 201
    refused = _create(client_a, "b", 41)
    assert refused.status_code == 403 and "ask for at most 40 GB" in refused.json()["detail"]
    assert _create(client_a, "c", 40).status_code == 201
    assert sum(Volume.objects.filter(tenant=tenant_a).values_list("size_gb", flat=True)) == 100


def test_quotas_are_per_tenant(tenant_a, tenant_b, client_a, client_b):
    create_tenant(slug=tenant_a.slug, name=tenant_a.name, max_nodes=64, actor="test", max_volumes=1)
    assert _create(client_a, "a1", 10).status_code == 201
    assert _create(client_a, "a2", 10).status_code == 403
    assert _create(client_b, "b1", 10).status_code == 201  # globex's quota is untouched by acme's volumes


def test_a_tenant_without_a_storage_quota_may_create_no_volume(db):
    tenant = Tenant.objects.create(slug="bare", name="Bare")
    assert not StorageQuota.objects.filter(tenant=tenant).exists()
    response = _create(tenant_client(tenant), "x", 1)
    assert response.status_code == 403 and response.json()["code"] == "quota_exceeded"


def test_create_tenant_command_sets_the_storage_quota(db):
    from io import StringIO

    from django.core.management import call_command

    out = StringIO()
    call_command(
        "create_tenant", "initech", "--max-nodes", "4", "--max-volumes", "5", "--max-storage-gb", "500", stdout=out
    )
    quota = Tenant.objects.get(slug="initech").storage_quota
    assert (quota.max_volumes, quota.max_gb) == (5, 500) and "5 volume(s), 500 GB" in out.getvalue()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_twenty_concurrent_creates_cannot_squeeze_past_the_quota(tenant_a):
    """Each create locks the tenant row before counting, so racing requests see each other."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from django.db import connection

    create_tenant(slug=tenant_a.slug, name=tenant_a.name, max_nodes=64, actor="test", max_volumes=5)
    clients = [tenant_client(tenant_a) for _ in range(20)]
    barrier = threading.Barrier(20)

    def create(numbered):
        i, client = numbered
        try:
            barrier.wait()
            return _create(client, f"race-{i}", 1, name=f"v{i}").status_code
        finally:
            connection.close()

    with ThreadPoolExecutor(20) as pool:
        statuses = list(pool.map(create, enumerate(clients)))
    assert statuses.count(201) == 5 and statuses.count(403) == 15
    assert Volume.objects.filter(tenant=tenant_a).count() == 5
