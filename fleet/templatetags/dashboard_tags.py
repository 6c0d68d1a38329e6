"""`{% plotly_chart name figure refresh %}`: a chart container, its figure as embedded JSON, and
the endpoint static/js/charts.js refreshes it from."""

from django import template
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import mark_safe

from fleet.charts import figure_json

register = template.Library()


@register.simple_tag
def plotly_chart(name: str, figure, refresh_seconds: int = 30):
    return format_html(
        '<div class="chart" id="chart-{}" data-chart="{}" data-chart-url="{}" data-chart-refresh="{}"></div>'
        '<script type="application/json" id="chart-{}-figure">{}</script>',
        name,
        name,
        reverse("fleet:chart-json", args=[name]),
        refresh_seconds,
        name,
        mark_safe(figure_json(figure)),
    )


@register.filter
def get_item(mapping, key):
    return mapping[key]
