"""Admin of parts and evidence: GPUs, drives, sanitisation records and agent work items
(the evidence read-only)."""

from django.contrib import admin
from django.core.exceptions import PermissionDenied

from core.admin import AuditedModelAdmin, ReadOnlyAdmin

from ..models import (
    GPU,
    Drive,
    NodeAgentAction,
    SanitizationRecord,
)
from ..selectors import drive_removal_refusal, hardware_change_refusal


@admin.register(GPU)
class GPUAdmin(AuditedModelAdmin):
    list_display = ("__str__", "uuid", "serial")
    search_fields = ("uuid", "serial", "node__hostname")
    list_select_related = ("node",)
    raw_id_fields = ("node",)
    show_full_result_count = False

    def has_delete_permission(self, request, obj=None):
        return super().has_delete_permission(request, obj) and (
            obj is None or hardware_change_refusal(obj.node) is None
        )

    def delete_queryset(self, request, queryset):
        _refuse_locked(queryset.select_related("node"), hardware_change_refusal)
        super().delete_queryset(request, queryset)

    def get_readonly_fields(self, request, obj=None):
        return ("node", "index", "uuid") if obj is not None and hardware_change_refusal(obj.node) else ()


@admin.register(Drive)
class DriveAdmin(AuditedModelAdmin):
    list_display = ("serial", "node", "model", "capacity_gb", "interface", "self_encrypting", "missing_since")
    list_filter = ("interface", "self_encrypting")
    search_fields = ("serial", "node__hostname", "model")
    list_select_related = ("node",)
    raw_id_fields = ("node",)
    show_full_result_count = False

    def has_delete_permission(self, request, obj=None):
        return super().has_delete_permission(request, obj) and (obj is None or drive_removal_refusal(obj.node) is None)

    def delete_queryset(self, request, queryset):
        _refuse_locked(queryset.select_related("node"), drive_removal_refusal)
        super().delete_queryset(request, queryset)

    # what the agent saw is the agent's to say; the exit gate compares rows with its inventory
    AGENT_REPORTED = ("purge_supported", "last_reported_at", "missing_since")

    def get_readonly_fields(self, request, obj=None):
        locked = ("node", "serial") if obj is not None and hardware_change_refusal(obj.node) else ()
        return (*self.AGENT_REPORTED, *locked)


def _refuse_locked(queryset, refusal_of) -> None:
    """The bulk delete action checks each row the way the delete page does."""
    for obj in queryset:
        refusal = refusal_of(obj.node)
        if refusal:
            raise PermissionDenied(f"Nothing deleted: {obj}: {refusal}")


# ---- evidence and plans: read-only ------------------------------------------------------------


@admin.register(SanitizationRecord)
class SanitizationRecordAdmin(ReadOnlyAdmin):
    """Evidence: operators add records through the ops API or the console."""

    list_display = ("drive", "method", "technique", "tool", "verified", "actor", "source", "performed_at")
    list_filter = ("method", "verified", "source")
    search_fields = ("drive__serial", "drive__node__hostname")
    list_select_related = ("drive",)


@admin.register(NodeAgentAction)
class NodeAgentActionAdmin(ReadOnlyAdmin):
    """Work handed to node agents; requested by services, finished by the agent's report."""

    list_display = ("action", "node", "drive", "state", "requested_by", "created_at", "finished_at")
    list_filter = ("action", "state")
    search_fields = ("node__hostname", "drive__serial", "requested_by")
    list_select_related = ("node", "drive")
    show_full_result_count = False
