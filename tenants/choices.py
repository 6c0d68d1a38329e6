"""Tenancy choice sets."""

from django.db import models


class AllocationState(models.TextChoices):
    """docs/api.md allocation states. Transitions live in tenants.services.allocations only."""

    PENDING = "pending", "Pending"
    PROVISIONING = "provisioning", "Provisioning"
    ACTIVE = "active", "Active"
    RELEASING = "releasing", "Releasing"
    RELEASED = "released", "Released"
    CANCELLED = "cancelled", "Cancelled"
    FAILED = "failed", "Failed"


TERMINAL_ALLOCATION_STATES = frozenset({AllocationState.RELEASED, AllocationState.CANCELLED, AllocationState.FAILED})


class FabricMode(models.TextChoices):
    ISOLATED = "isolated", "Isolated partition"
    NONE = "none", "No fabric"


class AllocationNodeRole(models.TextChoices):
    ORIGINAL = "original", "Original"
    REPLACEMENT = "replacement", "Replacement"


class PartitionKind(models.TextChoices):
    IB_PKEY = "ib_pkey", "InfiniBand partition key"
    NVLINK = "nvlink", "NVLink partition"


class PartitionState(models.TextChoices):
    ACTIVE = "active", "Active"
    DELETED = "deleted", "Deleted"
