"""The 3 a.m. overview: what is wrong now, each tile linking to the list it counts."""

import re

import pytest

from core.periodic import PERIODIC_TASKS
from fleet.models import Node
from health.services.incidents import open_operator_incident

from .lifecycle_helpers import allocate

pytestmark = pytest.mark.django_db


def _tile(html: str, tile_id: str) -> str:
    start = html.index(f'id="{tile_id}"')
    return html[html.rindex("<a", 0, start) : html.index("</a>", start)]


def test_tiles_count_and_link_to_the_filtered_lists(small_fleet, operator_client, django_assert_max_num_queries):
    nodes = list(Node.objects.order_by("hostname"))
    Node.objects.filter(pk__in=[nodes[0].pk, nodes[1].pk]).update(health="unhealthy")
    allocate(nodes[0])
    open_operator_incident(nodes=[nodes[0]], title="PDU flicker", severity="warn", actor="test")
    html = operator_client.get("/").content.decode()

    incidents = _tile(html, "tile-incidents")
    assert '<div class="value">1</div>' in incidents and "1 warn" in incidents
    unwell = _tile(html, "tile-unwell")
    assert '<div class="value">2</div>' in unwell and "2 unhealthy" in unwell
    listed = operator_client.get(re.search(r'href="([^"]+)"', unwell).group(1).replace("&amp;", "&")).content.decode()
    assert nodes[0].hostname in listed and nodes[1].hostname in listed and nodes[2].hostname not in listed
    tenants = _tile(html, "tile-tenants")
    assert '<div class="value">1</div>' in tenants and "acme" in tenants
    affected = operator_client.get("/tenants/?affected=1").content.decode()
    assert "acme" in affected and "affected by an open incident" in affected
    severity = operator_client.get("/health/?severity=warn").content.decode()
    assert "PDU flicker" in severity
    assert "PDU flicker" not in operator_client.get("/health/?severity=fatal").content.decode()
    loops = _tile(html, "tile-loops")
    every_loop = len(PERIODIC_TASKS)  # no loop ran in this test: every one is late, and said so
    assert f'<div class="value">{every_loop}</div>' in loops
    assert 'id="loops"' in html and "never ran" in html

    with django_assert_max_num_queries(12):
        fragment = operator_client.get("/fleet/now/")
    assert fragment.status_code == 200 and b'id="tile-incidents"' in fragment.content
    assert b"<html" not in fragment.content  # a fragment the page swaps in, not a page
