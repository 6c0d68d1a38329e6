"""The rack power condition: a rack whose wall draw stays above its usable kW (the lower of what
its feeds can power and what its position can cool) for RACK_OVER_MINUTES minutes in a row opens
a condition and an incident naming the rack, its nodes and the tenants on them; the condition
clears, and its incident closes, at the first minute the draw is back at or below usable kW.

Level-triggered and idempotent: it reads the last minutes of the power history
(fleet.PowerPoint) each run, so a missed run, or two runs, change nothing.
"""

from datetime import datetime, timedelta

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from core.locks import locked_run
from fleet.models import Node, PowerPoint, Rack
from health.choices import ConditionStatus, IncidentOpener, IncidentState, IncidentStep, Severity
from health.models import Incident, IncidentEvent, RackPowerCondition
from tenants.models import AllocationNode

RACK_OVER_MINUTES = 5
ACTOR = "system:rack-power"


def _tenants_on(node_ids) -> list[str]:
    return sorted(
        set(
            AllocationNode.objects.filter(node_id__in=list(node_ids), ended_at__isnull=True).values_list(
                "allocation__tenant__slug", flat=True
            )
        )
    )


def check_rack_power(*, now: datetime) -> dict:
    since = now.replace(second=0, microsecond=0) - timedelta(minutes=RACK_OVER_MINUTES - 1)
    points: dict = {}
    for row in (
        PowerPoint.objects.filter(resolution="1m", at__gte=since, at__lte=now)
        .values("rack_id", "at", "kw", "source")
        .order_by("rack_id", "at")
    ):
        points.setdefault(row["rack_id"], []).append(row)
    active = {c.rack_id: c for c in RackPowerCondition.objects.filter(status=ConditionStatus.ACTIVE)}
    racks = {
        r["id"]: r
        for r in Rack.objects.filter(pk__in=set(points) | set(active)).values(
            "id", "name", "hall__site__slug", "hall__name", "rated_power_kw", "cooling_capacity_kw"
        )
    }
    opened = cleared = 0
    for rack_id, rows in points.items():
        rack = racks[rack_id]
        usable = min(rack["rated_power_kw"], rack["cooling_capacity_kw"])
        over = len(rows) >= RACK_OVER_MINUTES and all(r["kw"] > float(usable) for r in rows[-RACK_OVER_MINUTES:])
        if over and rack_id not in active:
            opened += _open(rack, usable, rows[-RACK_OVER_MINUTES:], now)
        elif rack_id in active and rows[-1]["kw"] <= float(usable):
            cleared += _clear(active[rack_id], rows[-1], now)
    return {"opened": opened, "cleared": cleared, "active": len(active) + opened - cleared}


@transaction.atomic
def _open(rack: dict, usable, rows: list[dict], now: datetime) -> int:
    node_ids = list(Node.objects.filter(rack_id=rack["id"]).order_by("hostname").values_list("id", "hostname"))
    tenants = _tenants_on([n for n, _ in node_ids])
    peak = max(r["kw"] for r in rows)
    sources = sorted({r["source"] for r in rows})
    where = f"{rack['hall__site__slug']}/{rack['hall__name']}/{rack['name']}"
    title = f"Rack {where} above its usable {usable} kW for {RACK_OVER_MINUTES} min (peak {peak:.1f} kW)"
    detail = (
        f"{title}. Draw source: {', '.join(sources)}. Nodes: {', '.join(h for _, h in node_ids) or 'none'}. "
        f"Tenants: {', '.join(tenants) or 'none'}. Usable kW is the lower of the rack's power rating and "
        "its cooling capacity: move load off the rack or cap its nodes' power."
    )
    try:
        with transaction.atomic():
            condition = RackPowerCondition.objects.create(
                rack_id=rack["id"],
                over_since=rows[0]["at"],
                opened_at=now,
                usable_kw=usable,
                peak_kw=peak,
                source=sources[0] if len(sources) == 1 else "mixed",
            )
    except IntegrityError:
        return 0  # another run opened it
    incident = Incident.objects.create(
        title=title[:200],
        opened_by=IncidentOpener.POLICY,
        severity=Severity.WARN,
        signals=["rack_over_power"],
        opened_at=now,
    )
    incident.nodes.set([n for n, _ in node_ids])
    IncidentEvent.objects.create(incident=incident, at=now, step=IncidentStep.DETECT, actor=ACTOR, detail=detail)
    condition.incident = incident
    condition.save(update_fields=["incident"])
    return 1


@transaction.atomic
def _clear(condition: RackPowerCondition, last: dict, now: datetime) -> int:
    updated = RackPowerCondition.objects.filter(pk=condition.pk, status=ConditionStatus.ACTIVE).update(
        status=ConditionStatus.CLEARED, cleared_at=now
    )
    if not updated:
        return 0
    if condition.incident_id:
        detail = f"Draw fell back to {last['kw']:.1f} kW, within the rack's usable {condition.usable_kw} kW."
        IncidentEvent.objects.create(
            incident_id=condition.incident_id, at=now, step=IncidentStep.CLOSE, actor=ACTOR, detail=detail
        )
        Incident.objects.filter(pk=condition.incident_id).filter(~Q(state=IncidentState.CLOSED)).update(
            state=IncidentState.CLOSED, closed_at=now
        )
    return 1


def run_rack_power_check(now: datetime | None = None) -> dict | None:
    now = now or timezone.now()
    with locked_run("rack_power") as acquired:
        if not acquired:
            return None
        return check_rack_power(now=now)
