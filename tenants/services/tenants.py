"""Creating tenants and their quotas."""

from django.core.exceptions import ValidationError
from django.db import transaction

from core.errors import Invalid
from core.reference_data import generations
from core.services.audit import record_audit
from core.validators import validate_display_text
from fleet.models import NodeType
from tenants.models import Quota, StorageQuota, Tenant

# Storage a new tenant may hold unless the operator says otherwise: a commercial policy, not a
# measured figure (tenants/migrations/0004 gives existing tenants the same).
DEFAULT_MAX_VOLUMES = 64
DEFAULT_MAX_STORAGE_GB = 100_000


def all_generations() -> list[str]:

    names = {row.generation for row in generations()} | set(NodeType.objects.values_list("generation", flat=True))
    return sorted(names)


@transaction.atomic
def create_tenant(
    *,
    slug: str,
    name: str,
    max_nodes: int,
    actor: str,
    max_volumes: int | None = None,
    max_storage_gb: int | None = None,
) -> tuple[Tenant, bool]:
    """Create (or update the quota of) a tenant; `max_nodes` applies to every generation. The
    storage quota is the default for a new tenant and kept for an existing one unless given."""
    try:
        validate_display_text(name or slug)
    except ValidationError as exc:
        raise Invalid(f"The tenant name {exc.messages[0]}.") from None
    tenant, created = Tenant.objects.get_or_create(slug=slug, defaults={"name": name or slug})
    for generation in all_generations():
        Quota.objects.update_or_create(tenant=tenant, generation=generation, defaults={"max_nodes": max_nodes})
    storage, _ = StorageQuota.objects.get_or_create(
        tenant=tenant, defaults={"max_volumes": DEFAULT_MAX_VOLUMES, "max_gb": DEFAULT_MAX_STORAGE_GB}
    )
    if max_volumes is not None or max_storage_gb is not None:
        storage.max_volumes = storage.max_volumes if max_volumes is None else max_volumes
        storage.max_gb = storage.max_gb if max_storage_gb is None else max_storage_gb
        storage.save(update_fields=["max_volumes", "max_gb", "updated_at"])
    record_audit(
        actor=actor,
        action="tenant.create" if created else "tenant.quota",
        target=tenant,
        after={
            "slug": slug,
            "name": tenant.name,
            "max_nodes_per_generation": max_nodes,
            "max_volumes": storage.max_volumes,
            "max_storage_gb": storage.max_gb,
        },
    )
    return tenant, created
