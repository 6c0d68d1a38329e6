"""Admin of parts and evidence: GPUs, drives, sanitisation records and agent work items
(the evidence read-only)."""

from dataclasses import dataclass

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db.models import Q

from core.admin import AtScaleAdmin, AuditedModelAdmin, ReadOnlyAdmin

from ..models import (
    ALLOCATED_LIFECYCLES,
    GPU,
    Drive,
    NodeAgentAction,
    SanitizationRecord,
    hardware_change_refusals,
)
from ..selectors import drive_removal_message, drive_removal_refusal, hardware_change_refusal

# A million GPUs and drives: lists ordered by an indexed key of their own (the models' order,
# by hostname, is a join sorted over every row), counted up to a cap, searched through the index.
PART_HELP = "Exact or first characters of {what}, or of the node's hostname."


@dataclass(frozen=True)
class NodeEvidence:
    """What a node's admin pages need of its tenancy, asked once per node and request (a node's
    change page asks for every inline permission): its live allocation, and why its GPUs and
    drives may not change, or its drives be removed (None when they may)."""

    allocation: tuple | None  # (allocation id, name) of the live allocation
    allocated: bool
    refusal: str | None
    removal_refusal: str | None


def node_evidence(request, node) -> NodeEvidence | None:
    if node is None or not node.pk:
        return None
    cache = request.__dict__.setdefault("_node_evidence", {})
    if node.pk not in cache:
        # the latest membership says it all: a live one is the latest (one at a time per node)
        latest = (
            node.allocation_memberships.order_by("-started_at")
            .values_list("allocation_id", "allocation__name", "started_at", "ended_at")
            .first()
        )
        live = latest is not None and latest[3] is None
        last = latest[2] if latest else None
        refusal = hardware_change_refusals([node], history={node.pk: (live, last)}).get(node.pk)
        cache[node.pk] = NodeEvidence(
            allocation=(latest[0], latest[1]) if live else None,
            allocated=live or node.lifecycle in ALLOCATED_LIFECYCLES,
            refusal=refusal,
            removal_refusal=refusal or drive_removal_message(node, served=last is not None),
        )
    node.admin_evidence = cache[node.pk]  # for the page's read-only fields, which see only the node
    return cache[node.pk]


def hardware_refusal(request, node) -> str | None:
    evidence = node_evidence(request, node)
    return evidence.refusal if evidence else None


def removal_refusal(request, node) -> str | None:
    evidence = node_evidence(request, node)
    return evidence.removal_refusal if evidence else None


@admin.register(GPU)
class GPUAdmin(AuditedModelAdmin, AtScaleAdmin):
    list_display = ("__str__", "uuid", "serial")
    sortable_by = ("uuid",)  # unique; a sort by serial was a sort of a million rows (docs/admin.md)
    search_fields = ("uuid",)
    search_help_text = PART_HELP.format(what="a GPU UUID or serial")
    index_search = {"gpu_uuid": "pk", "gpu_serial": "pk", "hostname": "node_id"}
    # fleet_gpu_node_index_unique: by the node's id, not "node" (which sorts by the node's own
    # order, its hostname: a join sorted over every GPU)
    ordering = ("node_id", "index")
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
    sortable_by = ("serial",)  # unique; the other columns have no index to sort a million rows by
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
            obj is None or removal_refusal(request, obj.node) is None
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
    sortable_by = ("performed_at",)
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
    sortable_by = ()
    list_filter = ("action", "state")
    search_fields = ("node__hostname",)
    search_help_text = "Exact or first characters of a hostname or a drive serial."
    index_search = {"hostname": "node_id", "drive_serial": "drive_id"}
    list_select_related = ("node", "drive")
    raw_id_fields = ("node", "drive")
