"""Tenant volumes, exported only to the tenant's own partition, within the tenant's storage
quota (count and total GB)."""

from django.db import transaction
from django.db.models import Count, Sum

from core.errors import Conflict, Refused
from core.services.audit import record_audit
from tenants.choices import AllocationState
from tenants.models import FabricPartition, StorageQuota, Tenant, Volume
from tenants.services.access import LIVE_STATES, refresh_access

MAX_VOLUMES_PER_ALLOCATION = 16


class VolumeNotAttachable(Conflict):
    code = "volume_not_attachable"


class StorageQuotaExceeded(Refused):
    """The tenant would hold more volumes, or more GB, than its storage quota allows."""

    code = "quota_exceeded"


def storage_held(tenant: Tenant) -> tuple[int, int]:
    """(volumes, total GB) the tenant holds now."""
    held = Volume.objects.filter(tenant=tenant).aggregate(n=Count("id"), gb=Sum("size_gb"))
    return held["n"] or 0, held["gb"] or 0


@transaction.atomic
def create_volume(
    *,
    tenant: Tenant,
    name: str,
    size_gb: int,
    export_partition: FabricPartition | None,
    actor: str,
    idempotency_key: str = "",
) -> Volume:
    if export_partition is not None and export_partition.tenant_id != tenant.pk:
        # Callers look partitions up within the tenant; this guards the invariant itself.
        raise ValueError("a volume can only be exported to its own tenant's partition")
    # The tenant row is locked so concurrent creates cannot both squeeze under the quota.
    Tenant.objects.select_for_update().filter(pk=tenant.pk).first()
    quota = StorageQuota.objects.filter(tenant=tenant).first()
    max_volumes, max_gb = (quota.max_volumes, quota.max_gb) if quota else (0, 0)
    volumes, gb = storage_held(tenant)
    if volumes + 1 > max_volumes:
        raise StorageQuotaExceeded(
            f"Your storage quota is {max_volumes} volume(s) and you hold {volumes}; "
            "ask your provider for a larger quota.",
            extra={"quota": {"max_volumes": max_volumes, "volumes": volumes}},
        )
    if gb + size_gb > max_gb:
        raise StorageQuotaExceeded(
            f"Your storage quota is {max_gb} GB and you hold {gb} GB; ask for at most "
            f"{max(max_gb - gb, 0)} GB or ask your provider for a larger quota.",
            extra={"quota": {"max_gb": max_gb, "gb": gb}},
        )
    volume = Volume.objects.create(
        tenant=tenant, name=name, size_gb=size_gb, export_partition=export_partition, idempotency_key=idempotency_key
    )
    record_audit(
        actor=actor,
        action="volume.create",
        target=volume,
        after={
            "name": name,
            "size_gb": size_gb,
            "export_partition": str(export_partition.pk) if export_partition else None,
        },
    )
    return volume


@transaction.atomic
def attach_volume(*, allocation, volume: Volume, actor: str) -> bool:
    """Mount `volume` on every node of a live allocation (the agents get a `sync_access`).
    Returns False when it was already attached."""
    if volume.tenant_id != allocation.tenant_id:
        raise ValueError("a volume can only be attached to its own tenant's allocation")
    if allocation.state not in LIVE_STATES and allocation.state != AllocationState.PENDING:
        raise VolumeNotAttachable(
            f"Allocation {allocation.pk} is {allocation.state}; volumes attach to pending, provisioning or active ones."
        )
    if allocation.volumes.filter(pk=volume.pk).exists():
        return False
    if allocation.volumes.count() >= MAX_VOLUMES_PER_ALLOCATION:
        raise VolumeNotAttachable(f"An allocation mounts at most {MAX_VOLUMES_PER_ALLOCATION} volumes.")
    allocation.volumes.add(volume)
    record_audit(
        actor=actor,
        action="allocation.volume_attached",
        target=allocation,
        after={"volume": str(volume.pk), "name": volume.name},
    )
    refresh_access([allocation], reason=f"volume {volume.pk} attached")
    return True
