"""The audit trail: every write that matters calls one of these inside its transaction."""

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.db import models
from django.utils import timezone

from core.context import current_request_id
from core.models import AuditEvent


@dataclass(frozen=True)
class AuditEntry:
    action: str
    target: models.Model
    before: Any = None
    after: Any = None
    reason: str = ""


def actor_label(user=None, *, system: str | None = None) -> str:
    """How an actor is written in audit rows: `user:alice`, `system:reconciler`."""
    if system:
        return f"system:{system}"
    if user is not None and getattr(user, "is_authenticated", False):
        return f"user:{user.get_username()}"
    return "anonymous"


def record_audit(
    *, actor: str, action: str, target: models.Model, before: Any = None, after: Any = None, reason: str = ""
) -> AuditEvent:
    return record_audit_about(
        actor=actor,
        action=action,
        object_type=target._meta.label_lower,
        object_id=str(target.pk),
        before=before,
        after=after,
        reason=reason,
    )


def record_audit_about(
    *,
    actor: str,
    action: str,
    object_type: str,
    object_id: str = "",
    before: Any = None,
    after: Any = None,
    reason: str = "",
) -> AuditEvent:
    """An audit row about a kind of object rather than one row of it (an export of a list, a
    refused request that never reached an object): `object_id` empty, or what the request named."""
    return AuditEvent.objects.create(
        at=timezone.now(),
        actor=actor,
        action=action,
        object_type=object_type[:100],
        object_id=str(object_id)[:64],
        before=before,
        after=after,
        reason=reason,
        request_id=current_request_id(),
    )


def record_audits(*, actor: str, entries: Iterable[AuditEntry]) -> int:
    """One INSERT for a batch of audit rows (control loops write many at once)."""
    now = timezone.now()
    request_id = current_request_id()
    rows = [
        AuditEvent(
            at=now,
            actor=actor,
            action=e.action,
            object_type=e.target._meta.label_lower,
            object_id=str(e.target.pk),
            before=e.before,
            after=e.after,
            reason=e.reason,
            request_id=request_id,
        )
        for e in entries
    ]
    AuditEvent.objects.bulk_create(rows, batch_size=2000)
    return len(rows)
