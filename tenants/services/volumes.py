"""Tenant volumes, exported only to the tenant's own partition."""
from django.db import transaction

from core.services.audit import record_audit
from tenants.models import FabricPartition, Tenant, Volume


@transaction.atomic
def create_volume(*, tenant: Tenant, name: str, size_gb: int, export_partition: FabricPartition | None,
                  actor: str, idempotency_key: str = "") -> Volume:
    if export_partition is not None and export_partition.tenant_id != tenant.pk:
        # Callers look partitions up within the tenant; this guards the invariant itself.
        raise ValueError("a volume can only be exported to its own tenant's partition")
    volume = Volume.objects.create(tenant=tenant, name=name, size_gb=size_gb, export_partition=export_partition,
                                   idempotency_key=idempotency_key)
    record_audit(actor=actor, action="volume.create", target=volume,
                 after={"name": name, "size_gb": size_gb,
                        "export_partition": str(export_partition.pk) if export_partition else None})
    return volume
