"""Health in the admin: read-only. Conditions come from agent heartbeats and checks, incidents
from the health services; the console is where operators act on them."""

from django.contrib import admin
from django.db.models import Q

from core.admin import AtScaleAdmin, ReadOnlyAdmin

from .models import Condition, FabricHold, Incident


@admin.register(Condition)
class ConditionAdmin(ReadOnlyAdmin, AtScaleAdmin):
    list_display = ("node", "gpu_index", "signal", "severity", "status", "first_seen", "last_seen", "count")
    # no "signal" filter: its choices would be a DISTINCT over every condition row
    list_filter = ("severity", "status")
    search_fields = ("node__hostname",)
    search_help_text = "Exact or first characters of a hostname."
    index_search = {"hostname": "node_id"}
    list_select_related = ("node",)
    raw_id_fields = ("node",)


@admin.register(Incident)
class IncidentAdmin(ReadOnlyAdmin, AtScaleAdmin):
    list_display = ("title", "state", "severity", "opened_by", "opened_at", "closed_at")
    list_filter = ("state",)
    search_fields = ("title",)
    search_help_text = "Exact or first characters of an incident id or of a hostname it touched."
    index_search = {
        "incident_id": "pk",
        "hostname": lambda ids: Q(pk__in=Incident.nodes.through.objects.filter(node_id__in=ids).values("incident_id")),
    }


@admin.register(FabricHold)
class FabricHoldAdmin(ReadOnlyAdmin, AtScaleAdmin):
    """Nodes whose fabric signals a correlated link failure holds (health.services.fabric):
    written and ended only by the health sweep."""

    list_display = ("node", "incident", "held_at", "failing_since", "signals", "returned_at", "released_at")
    # open holds first is what an operator looks for: the filter is on the two end times
    list_filter = (("returned_at", admin.EmptyFieldListFilter), ("released_at", admin.EmptyFieldListFilter))
    search_fields = ("node__hostname",)
    search_help_text = "Exact or first characters of a hostname or of the incident id."
    index_search = {"hostname": "node_id", "incident_id": "incident_id"}
    list_select_related = ("node", "incident")
    raw_id_fields = ("node", "incident")
