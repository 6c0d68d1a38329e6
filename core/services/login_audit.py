"""Sign-ins in the audit trail: every success, failure and lockout (console and admin), with
the address, so an investigation sees password guessing next to what the account then did."""

from axes.signals import user_locked_out
from django.contrib.auth import get_user_model
from django.contrib.auth.signals import user_logged_in, user_login_failed
from django.dispatch import receiver
from django.utils import timezone

from core.api.throttles import client_address
from core.context import current_request_id
from core.models import AuditEvent

# The longest username we keep in a row about a failed attempt (the field is free text from anyone).
MAX_USERNAME_CHARS = 150


def _address(request) -> str:
    return client_address(request) if request is not None else ""


def _record(*, action: str, username: str, user=None, request=None, reason: str = "") -> None:
    username = (username or "")[:MAX_USERNAME_CHARS]
    AuditEvent.objects.create(
        at=timezone.now(),
        actor=f"user:{username}" if username else "anonymous",
        action=action,
        object_type=get_user_model()._meta.label_lower,
        object_id=str(user.pk) if user is not None else "",
        after={"username": username, "address": _address(request)},
        reason=reason,
        request_id=current_request_id(),
    )


@receiver(user_logged_in)
def audit_login(sender, request, user, **kwargs):
    _record(action="auth.login", username=user.get_username(), user=user, request=request)


@receiver(user_login_failed)
def audit_login_failure(sender, credentials, request=None, **kwargs):
    username = credentials.get("username", "")
    user = get_user_model().objects.filter(username=username[:MAX_USERNAME_CHARS]).first() if username else None
    _record(action="auth.login_failed", username=username, user=user, request=request)


@receiver(user_locked_out)
def audit_lockout(sender, request, username, ip_address, **kwargs):
    user = get_user_model().objects.filter(username=(username or "")[:MAX_USERNAME_CHARS]).first()
    _record(
        action="auth.locked_out",
        username=username or "",
        user=user,
        request=request,
        reason=f"too many failed sign-ins from {ip_address}",
    )
