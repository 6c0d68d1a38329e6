"""Admin of the fleet's software: reported inventory (read only), golden baselines (created and
made golden through fleet.services.baselines, so audited), rollouts (read only; pause, resume
and cancel through fleet.services.rollouts)."""

from django.contrib import admin, messages

from core.admin import AuditedModelAdmin, ReadOnlyAdmin
from core.errors import DomainError
from core.services.audit import actor_label

from ..models import NodeSoftware, Rollout, RolloutNode, SoftwareBaseline
from ..services.baselines import create_baseline, set_golden
from ..services.rollouts import control_rollout


@admin.register(NodeSoftware)
class NodeSoftwareAdmin(ReadOnlyAdmin):
    list_display = ("node", "component", "version", "state", "source", "observed_at")
    list_filter = ("component", "state", "source")
    search_fields = ("node__hostname", "version")
    list_select_related = ("node",)


@admin.register(SoftwareBaseline)
class SoftwareBaselineAdmin(AuditedModelAdmin):
    list_display = ("node_type", "name", "golden", "created_by", "created_at", "golden_set_by", "golden_set_at")
    list_filter = ("golden", "node_type")
    list_select_related = ("node_type",)
    fields = ("node_type", "name", "versions")
    actions = ["make_golden"]

    def has_change_permission(self, request, obj=None):
        return obj is None and super().has_change_permission(request, obj)  # versions are fixed once created

    def has_delete_permission(self, request, obj=None):
        return False  # rollouts and the audit trail refer to it

    def save_model(self, request, obj, form, change):
        saved = create_baseline(
            node_type=obj.node_type, name=obj.name, versions=obj.versions, actor=actor_label(request.user)
        )
        obj.pk = saved.pk

    @admin.action(description="Make the selected baseline its node type's golden one", permissions=["change"])
    def make_golden(self, request, queryset):
        if queryset.count() != 1:
            self.message_user(request, "Choose exactly one baseline.", messages.ERROR)
            return
        baseline = set_golden(baseline=queryset.get(), actor=actor_label(request.user), reason="admin")
        self.message_user(request, f"{baseline} is now golden.")


class RolloutNodeInline(admin.TabularInline):
    model = RolloutNode
    fields = ("node", "wave", "state", "taken_at", "finished_at", "detail")
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Rollout)
class RolloutAdmin(ReadOnlyAdmin):
    list_display = (
        "name",
        "baseline",
        "state",
        "canary_size",
        "wave_size",
        "capacity_floor_gpus",
        "created_by",
        "created_at",
    )
    list_filter = ("state",)
    list_select_related = ("baseline__node_type",)
    inlines = [RolloutNodeInline]
    actions = ["pause", "resume", "cancel"]

    def has_change_permission(self, request, obj=None):
        # the list's actions need it; the form stays read only (every field below)
        return obj is None and request.user.has_perm("fleet.change_rollout")

    def _control(self, request, queryset, action):
        for rollout in queryset:
            try:
                control_rollout(rollout=rollout, action=action, actor=actor_label(request.user), reason="admin")
            except DomainError as exc:
                self.message_user(request, exc.detail, messages.ERROR)

    @admin.action(description="Pause selected rollouts", permissions=["change"])
    def pause(self, request, queryset):
        self._control(request, queryset, "pause")

    @admin.action(description="Resume selected rollouts", permissions=["change"])
    def resume(self, request, queryset):
        self._control(request, queryset, "resume")

    @admin.action(
        description="Cancel selected rollouts (nodes not yet taken keep their versions)", permissions=["change"]
    )
    def cancel(self, request, queryset):
        self._control(request, queryset, "cancel")
