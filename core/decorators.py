"""View decorators for console pages."""

from functools import wraps

from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.shortcuts import render

from core.services.permissions import PermissionMissing, require_permission

OPERATORS_ONLY = "This page is for the provider's operators; this account is not one."


def operator_required(view):
    """Console pages for operators (active staff users). Someone not signed in goes to the
    sign-in page; a signed-in tenant user gets the 403 page, which says so and links to the
    portal (a second sign-in page would look like the first one failed)."""

    @wraps(view)
    def wrapped(request, *args, **kwargs):
        user = request.user
        if not user.is_authenticated:
            return redirect_to_login(request.get_full_path(), "/accounts/login/")
        if not (user.is_active and user.is_staff):
            raise PermissionDenied(OPERATORS_ONLY)
        return view(request, *args, **kwargs)

    return wrapped


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
