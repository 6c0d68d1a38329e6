"""Choice sets shared across apps."""

from django.db import models


class ApiTokenKind(models.TextChoices):
    TENANT = "tenant", "Tenant"
    OPERATOR = "operator", "Operator"


class TenantRole(models.TextChoices):
    ADMIN = "admin", "Admin"
    MEMBER = "member", "Member"
    VIEWER = "viewer", "Viewer"


class IdempotencyState(models.TextChoices):
    IN_PROGRESS = "in_progress", "In progress"
    COMPLETED = "completed", "Completed"
