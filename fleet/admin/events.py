"""A node's history (NodeEvent) as its own paginated list: read-only, newest first, filtered to
one node by `?node=<id>` (the node's page links here) along (node, -at), or searched by hostname,
serial or asset tag through the search index; the whole trail pages along an index on `at`."""

from django.contrib import admin
from django.urls import reverse
from django.utils.html import format_html

from core.admin import AtScaleAdmin, ReadOnlyAdmin

from ..models import Node, NodeEvent
from .nodes import IdFilter


class NodeFilter(IdFilter):
    """`?node=<id>` (the node's page links here), along the (node, -at) index."""

    title = "node"
    parameter_name = "node"
    model, column, label = Node, "node_id", "hostname"


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
