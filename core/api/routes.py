"""URL helpers: every API path answers with and without its trailing slash (docs/api.md)."""

from django.urls import re_path

AGENT_API_PREFIX = "/api/agent/"  # where the node-agent API lives (config/urls.py)


def api_route(pattern: str, view, name: str):
    """`api_route(r"allocations/(?P<pk>[^/]+)", view, "allocation-detail")` matches both forms."""
    return re_path(rf"^{pattern.strip('/')}/?$", view, name=name)
