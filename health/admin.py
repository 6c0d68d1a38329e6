"""Health in the admin: read-only. Conditions come from agent heartbeats and checks, incidents
from the health services; the console is where operators act on them."""

from django.contrib import admin

from core.admin import ReadOnlyAdmin

from .models import Condition, Incident


@admin.register(Condition)
class ConditionAdmin(ReadOnlyAdmin):
    list_display = ("node", "gpu_index", "signal", "severity", "status", "first_seen", "last_seen", "count")
    list_filter = ("severity", "status", "signal")
    search_fields = ("node__hostname", "signal", "detail")
    list_select_related = ("node",)
    raw_id_fields = ("node",)
    show_full_result_count = False


@admin.register(Incident)
class IncidentAdmin(ReadOnlyAdmin):
    list_display = ("title", "state", "severity", "opened_by", "opened_at", "closed_at")
    list_filter = ("state",)
    show_full_result_count = False
