"""Stored plans are read in the admin, never edited: they are computed results."""

from django.contrib import admin

from core.admin import ReadOnlyAdmin

from .models import MigrationPlan, PlannedAction


@admin.register(MigrationPlan)
class MigrationPlanAdmin(ReadOnlyAdmin):
    list_display = ("name", "created_at", "created_by", "feasible", "status", "applied_at")
    list_filter = ("feasible", "status")
    search_fields = ("name", "created_by")
    exclude = ("inputs", "result")  # large JSON: read them on /plans/<id>/ or through the API


@admin.register(PlannedAction)
class PlannedActionAdmin(ReadOnlyAdmin):
    list_display = ("kind", "starts_on", "ends_on", "rack", "node", "node_type", "nodes", "gpus", "plan")
    list_filter = ("kind", "plan")
    search_fields = ("rack__name", "node__hostname", "key")
    list_select_related = ("rack", "node", "node_type", "plan")
    raw_id_fields = ("rack", "node")
    date_hierarchy = "starts_on"
    show_full_result_count = False
