"""Server-side SVG for the rack elevation and the hall floor map (pure: rows in, markup out).

Built on the server like NetBox's elevations so they need no script, print well, and every
shape is a plain link an operator can open in a new tab.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

from .choices import HEALTH_COLORS, LIFECYCLE_COLORS, Health, Lifecycle

U_PX = 20
RACK_WIDTH = 420
LABEL_W = 36
TOP = 24
CELL_W, CELL_H, CELL_GAP = 74, 46, 6

LOAD_BANDS = (  # (lower bound of draw ÷ usable kW, colour, legend)
    (0.9, "#d64545", "≥ 90 % (hot)"),
    (0.7, "#f7c948", "70–90 %"),
    (0.0001, "#3ebd93", "< 70 %"),
    (0.0, "#e4e7eb", "empty"),
)
HEALTH_BANDS = (
    ("unhealthy", HEALTH_COLORS[Health.UNHEALTHY], "a node unhealthy"),
    ("degraded", HEALTH_COLORS[Health.DEGRADED], "a node degraded"),
    ("unknown", HEALTH_COLORS[Health.UNKNOWN], "health unknown"),
    ("healthy", HEALTH_COLORS[Health.HEALTHY], "all healthy"),
    ("empty", "#e4e7eb", "empty"),
)


def node_url(node_id) -> str:
    return f"/fleet/nodes/{node_id}/"


def rack_url(rack_id) -> str:
    return f"/fleet/racks/{rack_id}/"


def rack_elevation_svg(*, rack_name: str, u_height: int, nodes: Sequence) -> SafeString:
    """Front view: U1 at the bottom; each node a box at its U position and height, filled with its
    lifecycle colour, a dot in its health colour, linking to its node page."""
    height = TOP + u_height * U_PX + 12
    parts = [
        format_html(
            '<svg xmlns="http://www.w3.org/2000/svg" class="elevation" width="{}" height="{}" viewBox="0 0 {} {}" '
            'role="img" aria-label="Elevation of rack {}">',
            RACK_WIDTH,
            height,
            RACK_WIDTH,
            height,
            rack_name,
        )
    ]
    parts.append(format_html('<text x="{}" y="16" class="rack-title">{} · {}U</text>', LABEL_W, rack_name, u_height))
    for u in range(1, u_height + 1):
        y = TOP + (u_height - u) * U_PX
        parts.append(
            format_html(
                '<rect class="slot" x="{}" y="{}" width="{}" height="{}"/><text class="u" x="{}" y="{}">{}</text>',
                LABEL_W,
                y,
                RACK_WIDTH - LABEL_W - 4,
                U_PX,
                LABEL_W - 6,
                y + U_PX - 6,
                u,
            )
        )
    for node in nodes:
        size = node.node_type.u_height
        y = TOP + (u_height - (node.u_position + size - 1)) * U_PX
        state = Lifecycle(node.lifecycle).label if node.lifecycle in Lifecycle.values else node.lifecycle
        health = Health(node.health).label if node.health in Health.values else node.health
        parts.append(
            format_html(
                '<a href="{}" class="node" data-node="{}"><title>{} · U{}–U{} · {} · {} · {}</title>'
                '<rect x="{}" y="{}" width="{}" height="{}" rx="3" fill="{}" stroke="#102a43"/>'
                '<text class="host" x="{}" y="{}">{}</text><text class="sub" x="{}" y="{}">{} · {} · {}</text>'
                '<circle cx="{}" cy="{}" r="7" fill="{}" stroke="#fff" stroke-width="2"><title>health: {}</title></circle></a>',
                node_url(node.pk),
                node.pk,
                node.hostname,
                node.u_position,
                node.u_position + size - 1,
                node.node_type.slug,
                state,
                health,
                LABEL_W + 2,
                y + 2,
                RACK_WIDTH - LABEL_W - 8,
                size * U_PX - 4,
                LIFECYCLE_COLORS.get(node.lifecycle, "#ccc"),
                LABEL_W + 12,
                y + 22,
                node.hostname,
                LABEL_W + 12,
                y + 40,
                node.node_type.slug,
                state,
                health,
                RACK_WIDTH - 24,
                y + 16,
                HEALTH_COLORS.get(node.health, "#ccc"),
                health,
            )
        )
    parts.append(mark_safe("</svg>"))
    return mark_safe("".join(parts))


@dataclass(frozen=True)
class FloorCell:
    rack_id: object
    name: str
    row: int
    column: int
    load: float  # drawn kW ÷ usable kW
    drawn_kw: float
    usable_kw: float
    nodes: int
    health: str  # worst of its nodes: unhealthy > degraded > unknown > healthy; "empty" without nodes


def worst_health(*, nodes: int, unhealthy: int, degraded: int, unknown: int) -> str:
    if not nodes:
        return "empty"
    if unhealthy:
        return "unhealthy"
    if degraded:
        return "degraded"
    return "unknown" if unknown else "healthy"


def load_color(cell: FloorCell) -> str:
    if not cell.nodes:
        return LOAD_BANDS[-1][1]
    return next(color for bound, color, _ in LOAD_BANDS if cell.load >= bound)


def health_color(cell: FloorCell) -> str:
    return next(color for key, color, _ in HEALTH_BANDS if key == cell.health)


def floor_map_svg(*, hall_name: str, columns: int, cells: Sequence[FloorCell], color_by: str) -> SafeString:
    """Racks on the hall grid (row, column), coloured by load or by health; each links to its elevation."""
    columns = max([columns, *[c.column + 1 for c in cells]]) if cells else max(columns, 1)
    rows = max((c.row for c in cells), default=0) + 1
    width = columns * (CELL_W + CELL_GAP) + CELL_GAP
    height = rows * (CELL_H + CELL_GAP) + CELL_GAP
    paint = health_color if color_by == "health" else load_color
    parts = [
        format_html(
            '<svg xmlns="http://www.w3.org/2000/svg" class="floormap" width="{}" height="{}" viewBox="0 0 {} {}" '
            'role="img" aria-label="Floor map of {}">',
            width,
            height,
            width,
            height,
            hall_name,
        )
    ]
    for c in cells:
        x = CELL_GAP + c.column * (CELL_W + CELL_GAP)
        y = CELL_GAP + c.row * (CELL_H + CELL_GAP)
        short = c.name.rsplit("-", 1)[-1]
        value = f"{c.load * 100:.0f}%" if color_by != "health" else c.health
        parts.append(
            format_html(
                '<a href="{}" class="rack" data-rack="{}"><title>{} · {} of {} kW · {} node(s) · {}</title>'
                '<rect x="{}" y="{}" width="{}" height="{}" rx="4" fill="{}" stroke="#7b8794"/>'
                '<text class="name" x="{}" y="{}">{}</text><text class="val" x="{}" y="{}">{}</text></a>',
                rack_url(c.rack_id),
                c.rack_id,
                c.name,
                f"{c.drawn_kw:.1f}",
                f"{c.usable_kw:.1f}",
                c.nodes,
                c.health,
                x,
                y,
                CELL_W,
                CELL_H,
                paint(c),
                x + 6,
                y + 18,
                short,
                x + 6,
                y + 36,
                value,
            )
        )
    parts.append(mark_safe("</svg>"))
    return mark_safe("".join(parts))


def legend(color_by: str) -> list[tuple[str, str]]:
    if color_by == "health":
        return [(color, text) for _, color, text in HEALTH_BANDS]
    return [(color, text) for _, color, text in LOAD_BANDS]
