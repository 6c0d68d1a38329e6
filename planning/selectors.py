"""Reads for the migration-plan console pages (fixed query counts)."""

from __future__ import annotations

from collections import defaultdict

from django.db.models import Count, Max, Min, QuerySet
from django.db.models.fields.json import KT

from planning.models import MigrationPlan, PlannedAction


def plan_list() -> QuerySet:
    """Plans newest first, without their (large) JSON bodies: the headline is read in SQL."""
    return (
        MigrationPlan.objects.defer("inputs", "result")
        .annotate(headline=KT("result__headline"))
        .order_by("-created_at", "-id")
    )


def scheduled_work(plan: MigrationPlan) -> list[dict]:
    """The plan's scheduled actions grouped by kind and dates (one query, any plan size)."""
    return list(
        PlannedAction.objects.filter(plan=plan)
        .values("kind", "starts_on", "ends_on")
        .annotate(
            actions=Count("id"),
            racks=Count("rack", distinct=True),
            first_rack=Min("rack__name"),
            last_rack=Max("rack__name"),
        )
        .order_by("starts_on", "kind", "ends_on")
    )


def verdict_groups(position_verdicts: list[dict], hall_names: dict[str, str]) -> list[dict]:
    """Position verdicts grouped by hall, status and ready date, with one reason as the example."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for v in position_verdicts:
        groups[(v["hall_id"], v["status"], v["ready"])].append(v)
    rank = {"ok_now": 0, "after_upgrade": 1, "never": 2}
    rows = [
        {
            "hall": hall_names.get(hall, hall),
            "status": status,
            "ready": ready,
            "count": len(vs),
            "first": vs[0]["rack"],
            "last": vs[-1]["rack"],
            "reason": vs[0]["reason"],
        }
        for (hall, status, ready), vs in groups.items()
    ]
    return sorted(rows, key=lambda r: (rank[r["status"]], r["hall"], r["ready"] or ""))
