"""Which principal may call what. Wrong kind or role → 403 (API.md)."""
from rest_framework import permissions

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
    message = "This endpoint needs an operator token."

    def has_permission(self, request, view):
        principal = _principal(request)
        return principal is not None and principal.kind == "operator"


class IsAgent(permissions.BasePermission):
    message = "This endpoint needs an agent token."

    def has_permission(self, request, view):
        principal = _principal(request)
        return principal is not None and principal.kind == "agent"
