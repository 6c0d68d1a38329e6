"""Reads for the plan console pages (fixed query counts) and the reference rows they cite."""

from __future__ import annotations

from collections import defaultdict
from datetime import date

from django.db.models import Count, Max, Min, QuerySet
from django.db.models.fields.json import KT

from core.reference_data import generation as reference_generation
from core.reference_data import parameter
from fleet.models import Node, NodeType
from fleet.selectors import live_tenancy
from planning.inputs import GONE
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


def drain_groups(drains: list[dict]) -> list[dict]:
    """A stored plan's per-rack drain schedule grouped by start, what it frees and when that is used."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for d in drains:
        groups[(d["start"], d["frees"], d.get("used"), d["hall_id"])].append(d)
    return [
        {
            "start": start,
            "frees": frees,
            "used": used,
            "hall": hall,
            "racks": len(items),
            "nodes": sum(i["nodes"] for i in items),
            "gpus": sum(i["gpus"] for i in items),
            "first": items[0]["rack"],
            "last": items[-1]["rack"],
            "reason": items[0]["reason"],
        }
        for (start, frees, used, hall), items in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][3], kv[0][1]))
    ]


def reference_citations() -> list[dict]:
    """The reference rows the planner's defaults come from (shown beside the plan)."""
    rows = [
        parameter(n)
        for n in (
            "cdu_lead_time",
            "liquid_rack_capacity",
            "pue_industry_average",
            "ndr_two_tier_fat_tree_max_endpoints",
        )
    ]
    cited = [{"name": r.name, "value": r.value, "unit": r.unit, "source": f"{r.file}: {r.source}"} for r in rows]
    for r in (
        parameter(n)
        for n in (
            "burn_in_deadline",
            "pue_new_build",
            "air_cooled_rack_limit_max",
            "liquid_rack_residual_air_fraction",
            "cdu_redundancy",
            "floor_loading_tia942_recommended",
            "rack_footprint",
            "empty_rack_weight",
        )
    ):
        cited.append({"name": r.name, "value": r.value, "unit": r.unit, "source": f"{r.file}: {r.source}"})
    for model in ("H100-SXM5-80GB", "GB200-NVL72"):
        g = reference_generation(model)
        kw = f"{g.node_kw} kW/node" if g.node_kw is not None else f"{g.rack_kw_typical} kW/rack"
        cited.append(
            {
                "name": model,
                "value": f"{kw}, {g.cooling}, {g.fabric}",
                "unit": "",
                "source": f"generations.csv: {g.source}",
            }
        )
        cited.append(
            {
                "name": f"{model} vs H100",
                "value": f"training {g.training_vs_h100}, inference {g.inference_vs_h100}",
                "unit": "H100-equivalents per GPU",
                "source": f"generations.csv: {g.perf_source}",
            }
        )
    return cited


def drain_starts(record: MigrationPlan) -> dict:
    """rack (position) id → the day its drain phase starts."""
    return {
        pid: date.fromisoformat(phase["start"])
        for phase in record.result["phases"]
        if phase["kind"] == "drain"
        for pid in phase["position_ids"]
    }


def nodes_to_decommission(record: MigrationPlan, target: NodeType) -> QuerySet:
    """The old nodes in the racks the plan drains: what applying it schedules for decommission."""
    return (
        Node.objects.filter(rack_id__in=list(drain_starts(record)))
        .exclude(lifecycle__in=GONE)
        .exclude(node_type=target)
        .select_related("node_type")
        .order_by("hostname")
    )


def apply_preview(record: MigrationPlan) -> dict:
    """What applying the plan schedules, for the question asked before it: facility upgrades,
    node intakes, the nodes it decommissions and the tenants who hold any of them now."""
    result = record.result
    target = NodeType.objects.get(slug=record.inputs["parameters"]["target_node_type"])
    old = list(nodes_to_decommission(record, target))
    held = live_tenancy([n.pk for n in old])
    tenants = sorted({h["tenant"] for rows in held.values() for h in rows})
    return {
        "upgrades": sum(len(p["position_ids"]) for p in result["phases"] if p["kind"] == "facility_prep"),
        "intakes": len(result["placements"]),
        "intake_nodes": sum(p["nodes"] for p in result["placements"]),
        "target": target,
        "decommission_nodes": len(old),
        "decommission_gpus": sum(n.node_type.gpus_per_node for n in old),
        "held_nodes": [(n, held[n.pk]) for n in old if n.pk in held],
        "tenants": tenants,
    }
