"""The console's Twin page: the last `manage.py twin` report, drawn (docs/twin.md)."""

import json
from datetime import datetime
from decimal import Decimal
from pathlib import Path

from django.conf import settings
from django.shortcuts import render

from core.decorators import operator_required

from . import twin_charts


def latest_report_path() -> Path:
    return Path(settings.VAR_DIR) / "twin" / "latest.json"


def _latest() -> dict | None:
    try:
        report = json.loads(latest_report_path().read_text())
    except (OSError, ValueError):
        return None
    return report if isinstance(report, dict) and isinstance(report.get("variants"), list) else None


@operator_required
def twin_report(request):
    report = _latest()
    finished = None
    if report and report.get("finished_at"):
        try:
            finished = datetime.fromisoformat(report["finished_at"])
        except (TypeError, ValueError):
            finished = None
    figures = {
        "goodput": twin_charts.goodput_figure(report).to_json(),
        "causes": twin_charts.causes_figure(report).to_json(),
        "spares": twin_charts.spares_figure(report).to_json(),
        "credits": twin_charts.credits_figure(report).to_json(),
    }
    variants = [{**v, "sla_credits": Decimal(v["sla_credits"])} for v in (report or {}).get("variants", [])]
    return render(
        request,
        "devtools/twin.html",
        {
            "nav": "twin",
            "report": report,
            "variants": variants,
            "finished": finished,
            "llama3": (report or {}).get("llama3"),
            "figures": figures,
        },
    )
