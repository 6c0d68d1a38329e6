"""Admin of parts and evidence: GPUs, drives, sanitisation records and agent work items
(the evidence read-only)."""

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db.models import Q

from core.admin import AtScaleAdmin, AuditedModelAdmin, ReadOnlyAdmin

from ..models import (
    GPU,
    Drive,
    NodeAgentAction,
    SanitizationRecord,
)
from ..selectors import drive_removal_refusal, hardware_change_refusal

# A million GPUs and drives: lists ordered by an indexed key of their own (the models' order,
# by hostname, is a join sorted over every row), counted up to a cap, searched through the index.
PART_HELP = "Exact or first characters of {what}, or of the node's hostname."


def hardware_refusal(request, node, refusal_of=hardware_change_refusal) -> str | None:
    """`refusal_of(node)`, asked once per node and request: a node's change page asks it for every
    inline permission (add, change, delete of GPUs and drives) and each is a query or two."""
    if node is None or not node.pk:
        return None
    cache = request.__dict__.setdefault("_hardware_refusals", {})
    key = (refusal_of.__name__, node.pk)
    if key not in cache:
        cache[key] = refusal_of(node)
    return cache[key]


@admin.register(GPU)
class GPUAdmin(AuditedModelAdmin, AtScaleAdmin):
    list_display = ("__str__", "uuid", "serial")
    search_fields = ("uuid",)
    search_help_text = PART_HELP.format(what="a GPU UUID or serial")
    index_search = {"gpu_uuid": "pk", "gpu_serial": "pk", "hostname": "node_id"}
    ordering = ("node", "index")  # fleet_gpu_node_index_unique
    list_select_related = ("node",)
    raw_id_fields = ("node",)

    # A GPU of a node whose hardware is evidence (allocated, or in service since its last
    # sanitisation) is read-only here; GPU.clean() refuses adding one to such a node or moving
    # one onto or off it, whatever a form sends.
    def has_change_permission(self, request, obj=None):
        return super().has_change_permission(request, obj) and (
            obj is None or hardware_refusal(request, obj.node) is None
        )

    def has_delete_permission(self, request, obj=None):
        return super().has_delete_permission(request, obj) and (
            obj is None or hardware_refusal(request, obj.node) is None
        )

    def delete_queryset(self, request, queryset):
        _refuse_locked(queryset.select_related("node"), hardware_change_refusal)
        super().delete_queryset(request, queryset)


@admin.register(Drive)
class DriveAdmin(AuditedModelAdmin, AtScaleAdmin):
    list_display = ("serial", "node", "model", "capacity_gb", "interface", "self_encrypting", "missing_since")
    list_filter = ("interface", "self_encrypting")
    search_fields = ("serial",)
    search_help_text = PART_HELP.format(what="a drive serial")
    index_search = {"drive_serial": "pk", "hostname": "node_id"}
    ordering = ("serial",)  # unique
    list_select_related = ("node",)
    raw_id_fields = ("node",)

    def has_change_permission(self, request, obj=None):
        return super().has_change_permission(request, obj) and (
            obj is None or hardware_refusal(request, obj.node) is None
        )

    def has_delete_permission(self, request, obj=None):
        return super().has_delete_permission(request, obj) and (
            obj is None or hardware_refusal(request, obj.node, drive_removal_refusal) is None
        )

    def delete_queryset(self, request, queryset):
        _refuse_locked(queryset.select_related("node"), drive_removal_refusal)
        super().delete_queryset(request, queryset)

    # What the agent saw is the agent's to say (the exit gate compares rows with its inventory);
    # self-encryption decides how the drive is sanitised, so it is read from the drive, never typed.
    readonly_fields = AGENT_REPORTED = (
        "self_encrypting",
        "purge_supported",
        "last_reported_at",
        "missing_since",
    )


def _refuse_locked(queryset, refusal_of) -> None:
    """The bulk delete action checks each row the way the delete page does."""
    for obj in queryset:
        refusal = refusal_of(obj.node)
        if refusal:
            raise PermissionDenied(f"Nothing deleted: {obj}: {refusal}")


# ---- evidence and plans: read-only ------------------------------------------------------------


@admin.register(SanitizationRecord)
class SanitizationRecordAdmin(ReadOnlyAdmin, AtScaleAdmin):
    """Evidence: operators add records through the ops API or the console."""

    list_display = ("drive", "method", "technique", "tool", "verified", "actor", "source", "performed_at")
    list_filter = ("method", "verified", "source")
    search_fields = ("drive__serial",)
    search_help_text = "Exact or first characters of a drive serial or a hostname."
    index_search = {"drive_serial": "drive_id", "hostname": lambda ids: Q(drive__node_id__in=ids)}
    list_select_related = ("drive",)
    raw_id_fields = ("drive",)


@admin.register(NodeAgentAction)
class NodeAgentActionAdmin(ReadOnlyAdmin, AtScaleAdmin):
    """Work handed to node agents; requested by services, finished by the agent's report."""

    list_display = ("action", "node", "drive", "state", "requested_by", "created_at", "finished_at")
    list_filter = ("action", "state")
    search_fields = ("node__hostname",)
    search_help_text = "Exact or first characters of a hostname or a drive serial."
    index_search = {"hostname": "node_id", "drive_serial": "drive_id"}
    list_select_related = ("node", "drive")
    raw_id_fields = ("node", "drive")
