"""Who owns what: tenants and their members. Allocations, partitions, volumes and quotas
build on these."""
from django.conf import settings
from django.db import models

from core.choices import TenantRole
from core.models import BaseModel


class Tenant(BaseModel):
    """A customer organisation. Everything a tenant owns is invisible to every other tenant."""

    slug = models.SlugField(max_length=50, unique=True)
    name = models.CharField(max_length=200)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug


class Membership(BaseModel):
    """A user's role in a tenant (portal access)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=TenantRole.choices, default=TenantRole.MEMBER)

    class Meta:
        ordering = ["tenant__slug", "user__username"]
        constraints = [models.UniqueConstraint(fields=["tenant", "user"], name="tenants_membership_unique")]

    def __str__(self) -> str:
        return f"{self.user} in {self.tenant} ({self.role})"
