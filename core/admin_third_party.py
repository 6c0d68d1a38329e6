"""The admins of models Hangar does not own — users, groups and their permissions, celery-beat's
periodic tasks and schedules, django-axes' lockout records — re-registered on the audited base
(core.admin.AuditedModelAdmin), so that a change of rights or of a schedule is on the same trail
as a change of inventory: the field diff of every add and change, every delete, every refused
request, and one row per object for each of their list actions (enable, disable, run a task;
clean up attempts). Their own admin classes are kept; the audited base is put in front.

Passwords are never written down: the base's `form_diff` records a password field as "(set)",
and the password page records only that the password was changed or disabled."""

import functools

# Imported so that their ModelAdmins are registered before they are replaced here, whatever
# the order of INSTALLED_APPS.
import axes.admin  # noqa: F401
import django.contrib.auth.admin  # noqa: F401
import django_celery_beat.admin  # noqa: F401
from django.contrib.auth import get_user_model
from django.db import transaction

from .services.audit import AuditEntry, actor_label, record_audit, record_audits

ACTION_AUDIT_LIMIT = 1000  # objects named by one action's audit rows; a list action selects a page


def _audited_action(func, name: str):
    """A third-party list action that writes without a trail: the same action, then one audit row
    per selected object (`<model>.admin_<action>`), in one transaction with the action's writes."""

    @functools.wraps(func)
    def run(model_admin, request, queryset):
        targets = list(queryset[:ACTION_AUDIT_LIMIT])
        with transaction.atomic():
            response = func(model_admin, request, queryset)
            prefix = model_admin.audit_prefix or model_admin.opts.model_name
            record_audits(
                actor=actor_label(request.user),
                entries=[
                    AuditEntry(f"{prefix}.admin_{name}", target, after={"action": name}, reason="admin action")
                    for target in targets
                ],
            )
        return response

    return run


def _audited(base_admin: type, core_admin_base: type) -> type:
    """`base_admin` with the audited base in front of it and its list actions audited."""
    attributes = {"__module__": __name__}
    for action in base_admin.actions or ():
        name = action if isinstance(action, str) else action.__name__
        func = getattr(base_admin, name, None)
        if callable(func):
            attributes[name] = _audited_action(func, name)
    return type(f"Audited{base_admin.__name__}", (core_admin_base, base_admin), attributes)


def _user_admin(base_admin: type, core_admin_base: type) -> type:
    class AuditedUserAdmin(core_admin_base, base_admin):
        def audit_snapshot(self, obj) -> dict:
            return {"username": obj.get_username(), "is_staff": obj.is_staff, "is_superuser": obj.is_superuser}

        def user_change_password(self, request, id, form_url=""):
            """Django's password page, plus an audit row when it changed (never the password itself)."""
            with transaction.atomic():
                response = super().user_change_password(request, id, form_url)
                changed = (
                    request.method == "POST"
                    and response.status_code == 302
                    and response.url != request.get_full_path()  # Django's "conflicting data" bounce
                )
                if changed:
                    user = self.get_object(request, id)
                    record_audit(
                        actor=actor_label(request.user),
                        action="user.admin_password_set",
                        target=user,
                        after={"password": "(set)" if user.has_usable_password() else "(disabled)"},
                        reason="admin",
                    )
            return response

    AuditedUserAdmin.__module__ = __name__
    return AuditedUserAdmin


def register(site, core_admin_base: type) -> None:
    """Put the audited base in front of every third-party admin on `site` (called once from
    core.admin, which defines the base)."""
    user_model = get_user_model()
    for model, model_admin in list(site._registry.items()):
        if isinstance(model_admin, core_admin_base) or model._meta.app_label not in (
            "auth",
            "django_celery_beat",
            "axes",
        ):
            continue
        base = type(model_admin)
        audited = _user_admin(base, core_admin_base) if model is user_model else _audited(base, core_admin_base)
        site.unregister(model)
        site.register(model, audited)
