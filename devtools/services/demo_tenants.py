"""The demo tenants: `acme` and `globex` with quotas, portal logins and allocations that the
loops place and the simulated agents bring up (so the demo meters live usage)."""

from django.contrib.auth import get_user_model
from django.db import transaction

from core.choices import TenantRole
from core.services.audit import record_audit
from fleet.models import NodeType
from tenants.models import Allocation, Membership
from tenants.services.allocations import create_allocation
from tenants.services.tenants import create_tenant

DEMO_PASSWORD = "hangar-demo"
# slug, name, nodes per generation, [(allocation name, instance type, nodes)]
DEMO_TENANTS = (
    ("acme", "Acme Research", 48, [("llm-pretrain", "h100-sxm-8x", 32), ("eval-sweeps", "h100-sxm-8x", 4)]),
    ("globex", "Globex Inference", 24, [("finetune", "h100-sxm-8x", 16)]),
)
ACTOR = "system:demo"


@transaction.atomic
def seed_demo_tenant(stdout) -> None:
    for slug, name, max_nodes, allocations in DEMO_TENANTS:
        tenant, created = create_tenant(slug=slug, name=name, max_nodes=max_nodes, actor=ACTOR)
        username = f"{slug}-admin"
        user, user_created = get_user_model().objects.get_or_create(username=username)
        if user_created:
            user.set_password(DEMO_PASSWORD)
            user.save()
            record_audit(actor=ACTOR, action="user.create", target=user, after={"username": username})
        Membership.objects.get_or_create(tenant=tenant, user=user, defaults={"role": TenantRole.ADMIN})
        if created:
            stdout.write(
                f"  tenant {slug} created ({max_nodes} nodes per generation); portal login {username} / {DEMO_PASSWORD}"
            )
        if Allocation.objects.filter(tenant=tenant).exists():
            continue
        for alloc_name, instance_type, node_count in allocations:
            create_allocation(
                tenant=tenant,
                name=alloc_name,
                instance_type=NodeType.objects.get(slug=instance_type),
                node_count=node_count,
                fabric="isolated",
                actor=ACTOR,
            )
            stdout.write(f"  {slug}/{alloc_name}: {node_count} × {instance_type} requested (the loops place it)")
