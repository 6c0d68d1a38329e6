"""Template filters over core.formatting (a template builtin: no {% load %} needed).

{{ invoice.total|money:invoice.currency }}   → 1,234.50 USD
{{ line.unit_price|unit_price:invoice.currency }} → 2.49 USD / GPU-h
{{ row.quantity|gpu_hours }}                 → 22,056.0 GPU-h
{{ rack.power_kw|kw }}   {{ node.watts|watts }}   {{ e.it_kwh|kwh }}
{{ share|percent }}      {{ fraction|ratio }}
{{ seconds|duration }}   {{ heartbeat_at|age }}   {{ moment|datetime_utc }}   {{ n|count }}
"""

from django import template

from core import formatting

register = template.Library()

register.filter("money", lambda value, currency="USD": formatting.format_money(value, currency))
register.filter("unit_price", lambda value, currency="USD": formatting.format_unit_price(value, currency))
register.filter("gpu_hours", formatting.format_gpu_hours)
register.filter("kw", formatting.format_kw)
register.filter("watts", formatting.format_watts)
register.filter("kwh", formatting.format_kwh)
register.filter("celsius", formatting.format_celsius)
register.filter("percent", lambda value, decimals=1: formatting.format_percent(value, int(decimals)))
register.filter("ratio", lambda value, decimals=1: formatting.format_ratio(value, int(decimals)))
register.filter("duration", formatting.format_duration)
register.filter("age", lambda moment: formatting.format_age(moment))
register.filter("datetime_utc", formatting.format_datetime)
register.filter("count", formatting.format_count)
register.filter("number", lambda value, decimals=0: formatting.format_number(value, int(decimals)))
