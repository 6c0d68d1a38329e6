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


class DeliveryState(models.TextChoices):
    PENDING = "pending", "Pending"  # waiting for its next attempt (the first, or a retry after backoff)
    DELIVERED = "delivered", "Delivered"
    DEAD = "dead", "Dead-lettered"  # out of attempts, or refused for good: an operator may retry it
