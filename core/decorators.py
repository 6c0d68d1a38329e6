"""View decorators for console pages."""

from functools import wraps

from django.contrib.auth.decorators import user_passes_test
from django.shortcuts import render

from core.services.permissions import PermissionMissing, require_permission

operator_required = user_passes_test(lambda user: user.is_active and user.is_staff, login_url="/accounts/login/")
operator_required.__doc__ = "Console pages for operators: staff users only; others go to the login page."


def permission_denied_page(request, exc: PermissionMissing):
    """The console's refusal: 403, naming the permission (the API says the same in problem+json)."""
    return render(request, "permission_denied.html", {"detail": exc.detail, "permission": exc.permission}, status=403)


def console_action(action: str):
    """A console form that changes something: a POST needs the permission of `action` from the
    one table (core.services.permissions), exactly as the API's IsOperator asks. GETs (the
    form itself) stay open to staff."""

    def decorator(view):
        @wraps(view)
        def wrapped(request, *args, **kwargs):
            if request.method == "POST":
                try:
                    require_permission(request.user, action)
                except PermissionMissing as exc:
                    return permission_denied_page(request, exc)
            return view(request, *args, **kwargs)

        return wrapped

    return decorator
