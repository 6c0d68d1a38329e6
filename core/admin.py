"""Admin for the audit trail (read-only) and API tokens (created by a service so the plain
value is shown once)."""
from django.contrib import admin, messages

from .models import ApiToken, AuditEvent
from .services.tokens import create_api_token, revoke_api_token


class ReadOnlyAdmin(admin.ModelAdmin):
    """Rows written only by services (which audit them): viewable here, never added, changed or deleted."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    list_display = ("at", "actor", "action", "object_type", "object_id", "reason")
    list_filter = ("action", "object_type")
    search_fields = ("actor", "object_id", "reason", "request_id")
    date_hierarchy = "at"
    show_full_result_count = False


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ("prefix", "kind", "name", "tenant", "user", "role", "created_at", "last_used_at", "revoked_at")
    list_filter = ("kind", "role")
    search_fields = ("name", "prefix", "tenant__slug", "user__username")
    fields = ("kind", "name", "tenant", "user", "role", "prefix", "created_at", "last_used_at", "revoked_at")
    readonly_fields = ("prefix", "created_at", "last_used_at", "revoked_at")
    list_select_related = ("tenant", "user")
    actions = ["revoke"]

    def save_model(self, request, obj, form, change):
        if change:
            return super().save_model(request, obj, form, change)

        token, plain = create_api_token(kind=obj.kind, tenant=obj.tenant, user=obj.user, role=obj.role,
                                        name=obj.name, actor=f"user:{request.user.get_username()}")
        obj.pk = token.pk
        messages.warning(request, f"Token created. Copy it now, it will not be shown again: {plain}")

    @admin.action(description="Revoke selected tokens")
    def revoke(self, request, queryset):

        for token in queryset.filter(revoked_at__isnull=True):
            revoke_api_token(token=token, actor=f"user:{request.user.get_username()}")
