"""Small template helpers for fleet pages."""

from django import template

from fleet.choices import HEALTH_COLORS, LIFECYCLE_COLORS, Health, Lifecycle

register = template.Library()


@register.inclusion_tag("fleet/_state_pill.html")
def lifecycle_pill(state: str, count: int | None = None):
    label = Lifecycle(state).label if state in Lifecycle.values else state
    return {"label": label, "count": count, "color": LIFECYCLE_COLORS.get(state, "#ccc")}


@register.inclusion_tag("fleet/_state_pill.html")
def health_pill(state: str):
    label = Health(state).label if state in Health.values else state
    return {"label": label, "count": None, "color": HEALTH_COLORS.get(state, "#ccc")}
