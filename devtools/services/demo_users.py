"""The demo's operator login."""

from django.contrib.auth import get_user_model
from django.db import transaction

from core.services.audit import record_audit
from devtools.demo import DEMO_OPERATOR


@transaction.atomic
def ensure_demo_operator(stdout) -> None:
    username, password = DEMO_OPERATOR
    user, created = get_user_model().objects.get_or_create(
        username=username, defaults={"is_staff": True, "is_superuser": True}
    )
    if created:
        user.set_password(password)
        user.save()
        record_audit(
            actor="system:demo", action="user.create", target=user, after={"username": username, "staff": True}
        )
        stdout.write(f"  operator login created: {username} / {password}")
