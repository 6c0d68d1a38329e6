"""A node's history (NodeEvent) as its own paginated list: read-only, newest first, filtered to
one node by `?node=<id>` (the node's page links here) along (node, -at), or searched by hostname,
serial or asset tag through the search index; the whole trail pages along an index on `at`."""

from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.core.exceptions import ValidationError
from django.urls import reverse
from django.utils.html import format_html

from core.admin import AtScaleAdmin, ReadOnlyAdmin

from ..models import Node, NodeEvent


class NodeFilter(admin.SimpleListFilter):
    """`?node=<id>`; lists only the chosen node, never every node as choices."""

    title = "node"
    parameter_name = "node"

    def lookups(self, request, model_admin):
        value = self.value()
        if not value:
            return []
        node = Node.objects.filter(pk=_uuid_or_none(value)).first() if _uuid_or_none(value) else None
        return [(value, node.hostname if node else "unknown node")]

    def queryset(self, request, queryset):
        value = self.value()
        if not value:
            return queryset
        node_id = _uuid_or_none(value)
        if node_id is None:
            raise IncorrectLookupParameters("node must be a node id")
        return queryset.filter(node_id=node_id)


def _uuid_or_none(value):
    try:
        return Node._meta.pk.to_python(value)
    except ValidationError:
        return None


@admin.register(NodeEvent)
class NodeEventAdmin(ReadOnlyAdmin, AtScaleAdmin):
    list_display = ("at", "node_link", "actor", "action", "from_state", "to_state", "short_reason")
    list_filter = (NodeFilter,)
    search_fields = ("node__hostname",)
    search_help_text = "Exact or first characters of a hostname, node serial or asset tag."
    index_search = {"hostname": "node_id", "node_serial": "node_id", "asset_tag": "node_id"}
    list_select_related = ("node",)
    sortable_by = ("at",)
    list_per_page = 100

    @admin.display(description="node")
    def node_link(self, event):
        return format_html(
            '<a href="{}">{}</a>', reverse("admin:fleet_node_change", args=[event.node_id]), event.node.hostname
        )

    @admin.display(description="reason")
    def short_reason(self, event):
        return event.reason if len(event.reason) <= 120 else event.reason[:119] + "…"
