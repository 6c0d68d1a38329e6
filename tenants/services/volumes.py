"""Tenant volumes, exported only to the tenant's own partition, within the tenant's storage
quota (count and total GB). A volume with an export partition mounts only on an allocation in
that partition; deleting one is refused while any allocation that has not ended mounts it."""

from django.db import transaction
from django.db.models import Count, Sum

from core.errors import Conflict, Refused
from core.services.audit import record_audit
from tenants.choices import TERMINAL_ALLOCATION_STATES, AllocationState, FabricMode
from tenants.models import Allocation, FabricPartition, StorageQuota, Tenant, Volume
from tenants.services.access import LIVE_STATES, refresh_access

MAX_VOLUMES_PER_ALLOCATION = 16


class VolumeNotAttachable(Conflict):
    code = "volume_not_attachable"


class VolumeAttached(Conflict):
    """The volume is mounted by (or will be mounted by) an allocation that has not ended."""

    code = "volume_attached"


class VolumePartitionMismatch(Conflict):
    """The volume is exported only to a partition the allocation is not (or cannot be) in."""

    code = "volume_partition_mismatch"


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


def allocations_mounting(volume: Volume) -> list[Allocation]:
    """The allocations that have not ended and mount `volume` (pending ones will mount it;
    releasing ones still do until their nodes are wiped)."""
    return list(
        volume.allocations.exclude(state__in=TERMINAL_ALLOCATION_STATES)
        .order_by("created_at", "id")
        .only("id", "name", "state")
    )


def check_export_partitions(allocation: Allocation, volumes: list[Volume]) -> None:
    """Refuse (VolumePartitionMismatch) volumes the allocation's nodes could not reach: a volume
    exported to partition P mounts only on an isolated allocation whose partition is P. A placed
    allocation's partition is known; a pending one will be placed in the fabric domain of the
    partition its volumes are exported to (tenants.services.placement), so they must agree on one.
    A volume without an export partition mounts anywhere."""
    exported = [v for v in volumes if v.export_partition_id is not None]
    if not exported:
        return
    first = exported[0]
    if allocation.fabric != FabricMode.ISOLATED:
        raise VolumePartitionMismatch(
            f"Volume {first.name} ({first.pk}) is exported only to fabric partition "
            f"{first.export_partition.name}; allocation {allocation.name} ({allocation.pk}) has no fabric "
            'partition (fabric "none"). Use an isolated allocation or a volume without an export partition.',
            extra=_mismatch(first, allocation),
        )
    wanted = allocation.fabric_partition_id or first.export_partition_id
    for volume in exported:
        if volume.export_partition_id != wanted:
            where = (
                f"is in fabric partition {allocation.fabric_partition.name}"
                if allocation.fabric_partition_id
                else f"would need partition {first.export_partition.name} for volume {first.name}"
            )
            raise VolumePartitionMismatch(
                f"Volume {volume.name} ({volume.pk}) is exported only to fabric partition "
                f"{volume.export_partition.name}, but allocation {allocation.name} ({allocation.pk}) {where}; "
                "its nodes could not reach the volume.",
                extra=_mismatch(volume, allocation),
            )


def _mismatch(volume: Volume, allocation: Allocation) -> dict:
    return {
        "volume_id": str(volume.pk),
        "export_partition": str(volume.export_partition_id),
        "allocation_id": str(allocation.pk),
        "allocation_partition": str(allocation.fabric_partition_id) if allocation.fabric_partition_id else None,
    }


@transaction.atomic
def delete_volume(*, volume: Volume, actor: str) -> None:
    """Delete the volume and its data for good, freeing its share of the storage quota. Refused
    (VolumeAttached, naming them) while an allocation that has not ended mounts it; the volume row
    is locked so a concurrent attach cannot slip in between the check and the delete."""
    volume = Volume.objects.select_for_update(of=("self",)).select_related("export_partition").get(pk=volume.pk)
    mounting = allocations_mounting(volume)
    if mounting:
        names = ", ".join(f"{a.name} ({a.pk}, {a.state})" for a in mounting)
        raise VolumeAttached(
            f"Volume {volume.name} is mounted by {len(mounting)} allocation(s) that have not ended: {names}. "
            "Cancel them (or wait for them to end) first; the volume is detached, intact, when they end.",
            extra={"allocations": [{"id": str(a.pk), "name": a.name, "state": a.state} for a in mounting]},
        )
    record_audit(
        actor=actor,
        action="volume.delete",
        target=volume,
        before={
            "name": volume.name,
            "size_gb": volume.size_gb,
            "export_partition": str(volume.export_partition_id) if volume.export_partition_id else None,
            # ended allocations stop listing it once the row is gone; the audit keeps the link
            "mounted_by_ended": sorted(str(pk) for pk in volume.allocations.values_list("pk", flat=True)),
        },
        reason=f"deleted with its data; {volume.size_gb} GB of storage quota freed",
    )
    volume.delete()


@transaction.atomic
def attach_volume(*, allocation, volume: Volume, actor: str) -> bool:
    """Mount `volume` on every node of a live allocation (the agents get a `sync_access`).
    Returns False when it was already attached."""
    if volume.tenant_id != allocation.tenant_id:
        raise ValueError("a volume can only be attached to its own tenant's allocation")
    # Lock both rows: a concurrent delete of the volume, or placement of a pending allocation
    # (which fixes its partition), waits for this attach and then sees it.
    volume = Volume.objects.select_for_update(of=("self",)).select_related("export_partition").get(pk=volume.pk)
    allocation = (
        Allocation.objects.select_for_update(of=("self",)).select_related("fabric_partition").get(pk=allocation.pk)
    )
    if allocation.state not in LIVE_STATES and allocation.state != AllocationState.PENDING:
        raise VolumeNotAttachable(
            f"Allocation {allocation.pk} is {allocation.state}; volumes attach to pending, provisioning or active ones."
        )
    if allocation.volumes.filter(pk=volume.pk).exists():
        return False
    if allocation.volumes.count() >= MAX_VOLUMES_PER_ALLOCATION:
        raise VolumeNotAttachable(f"An allocation mounts at most {MAX_VOLUMES_PER_ALLOCATION} volumes.")
    check_export_partitions(allocation, [*allocation.volumes.select_related("export_partition"), volume])
    allocation.volumes.add(volume)
    record_audit(
        actor=actor,
        action="allocation.volume_attached",
        target=allocation,
        after={"volume": str(volume.pk), "name": volume.name},
    )
    refresh_access([allocation], reason=f"volume {volume.pk} attached")
    return True
