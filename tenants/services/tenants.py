"""Creating tenants and their quotas."""
from django.db import transaction

from core.reference_data import generations
from core.services.audit import record_audit
from fleet.models import NodeType
from tenants.models import Quota, Tenant


def all_generations() -> list[str]:

    names = {row.generation for row in generations()} | set(NodeType.objects.values_list("generation", flat=True))
    return sorted(names)


@transaction.atomic
def create_tenant(*, slug: str, name: str, max_nodes: int, actor: str) -> tuple[Tenant, bool]:
    """Create (or update the quota of) a tenant; `max_nodes` applies to every generation."""
    tenant, created = Tenant.objects.get_or_create(slug=slug, defaults={"name": name or slug})
    for generation in all_generations():
        Quota.objects.update_or_create(tenant=tenant, generation=generation, defaults={"max_nodes": max_nodes})
    record_audit(actor=actor, action="tenant.create" if created else "tenant.quota", target=tenant,
                 after={"slug": slug, "name": tenant.name, "max_nodes_per_generation": max_nodes})
    return tenant, created
