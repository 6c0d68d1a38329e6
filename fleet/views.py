"""Fleet console pages (thin: selectors compute, templates show)."""
from django.core.paginator import Paginator
from django.shortcuts import render

from core.api.lookups import parse_uuid
from core.decorators import operator_required

from .choices import LIFECYCLE_COLORS, Lifecycle
from .selectors import gpu_totals_by_lifecycle_and_generation, halls_for_filter, rack_rows, racks_with_power

RACKS_PER_PAGE = 100


@operator_required
def rack_list(request):
    hall_id = parse_uuid(request.GET.get("hall"))
    paginator = Paginator(racks_with_power(hall_id=hall_id), RACKS_PER_PAGE)
    page = paginator.get_page(request.GET.get("page"))
    return render(request, "fleet/rack_list.html", {
        "nav": "fleet",
        "page": page,
        "rows": rack_rows(page.object_list),
        "halls": halls_for_filter(),
        "hall_id": str(hall_id or ""),
        "colors": {str(k): v for k, v in LIFECYCLE_COLORS.items()},
    })


@operator_required
def overview(request):
    rows = gpu_totals_by_lifecycle_and_generation()
    total = sum(r["gpus"] for r in rows)
    by_state: dict[str, int] = {}
    for r in rows:
        by_state[r["lifecycle"]] = by_state.get(r["lifecycle"], 0) + r["gpus"]
    return render(request, "fleet/overview.html", {
        "nav": "overview",
        "total_gpus": total,
        "by_state": [(Lifecycle(s).label, s, n) for s, n in sorted(by_state.items(), key=lambda kv: -kv[1])],
        "rows": rows,
    })
