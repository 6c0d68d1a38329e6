"""The demo tenant: `acme` with a 32-node quota per generation and a portal login."""
from django.contrib.auth import get_user_model
from django.db import transaction

from core.choices import TenantRole
from core.services.audit import record_audit
from tenants.models import Membership
from tenants.services.tenants import create_tenant

DEMO_TENANT = ("acme", "Acme Research", 32)
DEMO_TENANT_USER = ("acme-admin", "hangar-demo")


@transaction.atomic
def seed_demo_tenant(stdout) -> None:
    slug, name, max_nodes = DEMO_TENANT
    tenant, created = create_tenant(slug=slug, name=name, max_nodes=max_nodes, actor="system:demo")
    username, password = DEMO_TENANT_USER
    user, user_created = get_user_model().objects.get_or_create(username=username)
    if user_created:
        user.set_password(password)
        user.save()
        record_audit(actor="system:demo", action="user.create", target=user, after={"username": username})
    Membership.objects.get_or_create(tenant=tenant, user=user, defaults={"role": TenantRole.ADMIN})
    if created:
        stdout.write(f"  tenant {slug} created ({max_nodes} nodes per generation); portal login {username} / {password}")
