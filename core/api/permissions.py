"""Which principal may call what. Wrong kind or role → 403 (docs/api.md); an operator token
acts with its user's Django permissions (core.services.permissions)."""

from rest_framework import permissions

from core.services.permissions import PermissionMissing, require_permission

SAFE_METHODS = permissions.SAFE_METHODS


def _principal(request):
    user = getattr(request, "user", None)
    return user if getattr(user, "is_authenticated", False) and hasattr(user, "kind") else None


class IsTenant(permissions.BasePermission):
    """A tenant token; viewers may only read."""

    message = "This endpoint needs a tenant token; viewer tokens may only read."

    def has_permission(self, request, view):
        principal = _principal(request)
        if principal is None or principal.kind != "tenant":
            self.message = "This endpoint needs a tenant token."
            return False
        if request.method not in SAFE_METHODS and not principal.can_write:
            self.message = "A viewer token may only read; ask a tenant admin for a member token."
            return False
        return True


class IsOperator(permissions.BasePermission):
    """An operator token. Reads need only that; every write also needs the permission of the
    view's `ops_action` (or of `view.ops_action_for(request)`, for a view whose action is in
    the body) for the token's user. A write that declares no action is refused: a new route
    cannot slip through unchecked."""

    message = "This endpoint needs an operator token."

    def has_permission(self, request, view):
        principal = _principal(request)
        if principal is None or principal.kind != "operator":
            return False
        if request.method in SAFE_METHODS:
            return True
        if hasattr(view, "ops_action_for"):
            action = view.ops_action_for(request)
            if action is None:  # not an action at all: the view answers 400 and changes nothing
                return True
        else:
            action = getattr(view, "ops_action", None)
        if action is None:
            raise PermissionMissing(
                f"{request.method} {request.path}",
                "",
                "This write declares no permission, so nobody may call it; report it as a bug.",
            )
        require_permission(principal.user, action)
        return True


class IsAgent(permissions.BasePermission):
    message = "This endpoint needs an agent token."

    def has_permission(self, request, view):
        principal = _principal(request)
        return principal is not None and principal.kind == "agent"
