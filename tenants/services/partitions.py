"""Fabric partitions: one key per tenant per fabric domain, unique in the domain (DB constraints)."""

from django.db import IntegrityError, transaction
from django.db.models import Max

from core.services.audit import record_audit
from fleet.choices import FabricTechnology
from fleet.models import FabricDomain
from tenants.choices import PartitionKind
from tenants.models import FabricPartition, Tenant

# InfiniBand P_Keys: 0x0000 is invalid and 0x7fff is the default (full-membership) partition.
FIRST_KEY = 0x0001
LAST_KEY = 0x7FFE


class PartitionExists(Exception):
    def __init__(self, partition: FabricPartition):
        self.partition = partition
        super().__init__(str(partition.pk))


def _kind(domain: FabricDomain) -> str:
    return PartitionKind.NVLINK if domain.technology == FabricTechnology.NVL72 else PartitionKind.IB_PKEY


@transaction.atomic
def create_partition(
    *, tenant: Tenant, fabric_domain: FabricDomain, name: str, actor: str, idempotency_key: str = ""
) -> FabricPartition:
    """A new partition with the next free key of the domain; two racing creators are settled by
    the unique (domain, key) and (tenant, domain) constraints."""
    existing = FabricPartition.objects.filter(tenant=tenant, fabric_domain=fabric_domain).first()
    if existing:
        raise PartitionExists(existing)
    for _ in range(20):
        top = FabricPartition.objects.filter(fabric_domain=fabric_domain).aggregate(k=Max("partition_key"))["k"]
        key = FIRST_KEY if top is None else top + 1
        if key > LAST_KEY:
            raise ValueError(f"fabric domain {fabric_domain.name} has no free partition key")
        try:
            with transaction.atomic():
                partition = FabricPartition.objects.create(
                    tenant=tenant,
                    fabric_domain=fabric_domain,
                    kind=_kind(fabric_domain),
                    partition_key=key,
                    name=name,
                    idempotency_key=idempotency_key,
                )
        except IntegrityError:
            existing = FabricPartition.objects.filter(tenant=tenant, fabric_domain=fabric_domain).first()
            if existing:
                raise PartitionExists(existing) from None
            continue  # another tenant took this key; take the next
        record_audit(
            actor=actor,
            action="fabric_partition.create",
            target=partition,
            after={"fabric_domain": fabric_domain.name, "partition_key": key, "kind": partition.kind},
        )
        return partition
    raise IntegrityError("could not allocate a partition key after 20 attempts")


def partition_for_allocation(*, tenant: Tenant, fabric_domain_id, actor: str) -> FabricPartition:
    """The tenant's partition in the domain, created if absent (placement's hot path: one read)."""
    existing = FabricPartition.objects.filter(tenant=tenant, fabric_domain_id=fabric_domain_id).first()
    if existing:
        return existing
    fabric_domain = FabricDomain.objects.get(pk=fabric_domain_id)
    try:
        return create_partition(
            tenant=tenant, fabric_domain=fabric_domain, name=f"{tenant.slug}-{fabric_domain.name}", actor=actor
        )
    except PartitionExists as exists:
        return exists.partition
