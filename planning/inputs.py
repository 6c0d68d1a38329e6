"""Turns operator parameters plus the inventory into the planner's ``PlanInputs``.

The planner (``planning.engines.migration``) is pure; this module is the only place
that reads rows for it: halls in scope (IT budget, PUE), rack positions (cooling, kW), the
current fleet per rack by node type, and the target node type from the catalogue. Operator
parameters (deliveries, durations, facility upgrades, floor, largest job, perf factors), checked
field by field by ``planning.api.serializers.PlanParametersSerializer``, are resolved against the
inventory here; what does not resolve becomes ``[{field, message}]`` errors, so the API and the
console form refuse bad input the same way. The resolved inputs are stored as canonical JSON so a stored plan
can be recomputed (and charted) without touching the inventory again.
"""

from __future__ import annotations

import math
import uuid
from collections import Counter, defaultdict
from datetime import date, timedelta

from django.db.models import Count, Q
from django.utils import timezone

from core.reference_data import generation as reference_generation
from core.reference_data import parameter
from fleet.choices import Lifecycle
from fleet.models import Hall, Node, NodeType, Rack
from planning.engines.migration import inputs as planner_inputs

# Nodes in these states are gone from the fleet a migration has to replace.
GONE = (Lifecycle.RETIRED, Lifecycle.DISPOSED)
# Nodes in these states serve tenants (or are between two tenants): the capacity a floor keeps.
# Nodes being brought up, burnt in, repaired, drained or sanitised still occupy their racks and
# draw power, but they are not capacity today.
IN_SERVICE = (Lifecycle.AVAILABLE, Lifecycle.PROVISIONING, Lifecycle.ACTIVE, Lifecycle.RELEASING, Lifecycle.WIPING)
DEFAULT_TARGET = "gb200-nvl72"
# Defaults. The floor is today's in-service capacity in the chosen unit (H100-equivalents for
# training unless the operator picks raw GPUs, inference, or a capacity plan's unit), so by
# default nothing leaves before it is replaced. Performance ratios come from generations.csv.
# Demo policy (operator input, not reference figures): the largest job is half of today's largest
# generation pool, in H100s; deliveries are 8-rack scalable units (the SuperPOD unit,
# generations.csv), as many as bring 9/8 of today's capacity in the floor unit, spread over
# delivery dates 8 weeks apart from week 4 to half the horizon (several units a date when there
# are more units than dates); the last 16 air positions get a CDU.
FLOOR_UNITS = ("h100e", "gpus", "capacity_unit")
DEFAULT_FLOOR_UNIT = "h100e"
DEFAULT_WORKLOAD = "training"
DEFAULT_JOB_FRACTION = 0.5
RACKS_PER_SCALABLE_UNIT = 8
FIRST_DELIVERY_WEEK = 4
WEEKS_BETWEEN_DELIVERIES = 8
DEFAULT_GROWTH = 1.125
DEFAULT_CDU_POSITIONS = 16
OVERRIDE_SOURCE = "operator input (overrides generations.csv)"


class PlanInputError(Exception):
    """Bad operator parameters; ``errors`` is ``[{field, message}]`` as in docs/api.md."""

    def __init__(self, errors: list[dict]):
        super().__init__("; ".join(f"{e['field']}: {e['message']}" for e in errors))
        self.errors = errors


def next_monday(today: date | None = None) -> date:
    today = today or timezone.now().date()
    return today + timedelta(days=(7 - today.weekday()) % 7 or 7)


def _resolve_racks(
    refs: list[str], by_id: dict[str, Rack], by_name: dict[str, Rack], field: str, errors: list[dict]
) -> list[Rack]:
    racks = []
    for i, ref in enumerate(refs):
        rack = by_id.get(ref) or by_name.get(ref)
        if rack is None:
            errors.append(
                {"field": f"{field}[{i}]", "message": f"No rack {ref!r} in the halls in scope; give a rack id or name."}
            )
        else:
            racks.append(rack)
    return racks


def json_ready(data: dict) -> dict:
    """Validated data with dates and UUIDs as strings: the canonical, storable parameters."""

    def conv(value):
        if isinstance(value, dict):
            return {k: conv(v) for k, v in value.items()}
        if isinstance(value, list):
            return [conv(v) for v in value]
        if isinstance(value, date):
            return value.isoformat()
        if isinstance(value, uuid.UUID):
            return str(value)
        return value

    return conv(data)


def _perf_ratio(
    gpu_model: str, workload: str, overrides: dict | None = None, slug: str | None = None, unit: dict | None = None
) -> float:
    """One GPU's capacity: the capacity unit's figure for its node type, an operator override, or the
    generations.csv ratio to an H100 for the workload."""
    if unit is not None:
        return float(unit["per_gpu"].get(slug, 0.0))
    if overrides and slug in overrides:
        return float(overrides[slug])
    row = reference_generation(gpu_model)
    ratio = row.training_vs_h100 if workload == "training" else row.inference_vs_h100
    return float(ratio) if ratio is not None else 1.0


def current_capacity(
    halls: list[str],
    workload: str,
    overrides: dict | None = None,
    positions: list[str] | None = None,
    unit: dict | None = None,
) -> tuple[int, float, float]:
    """Today's in-service (GPUs, capacity in the plan's unit, largest generation pool in that unit) in
    the halls in scope: what the default floor and the default largest job hold."""
    nodes = Node.objects.filter(lifecycle__in=IN_SERVICE, rack__hall_id__in=halls)
    if positions is not None:
        nodes = nodes.filter(Q(rack_id__in=[p for p in positions if _is_uuid(p)]) | Q(rack__name__in=positions))
    gpus, perf = 0, 0.0
    pools: dict[str, float] = defaultdict(float)
    for slug, model, generation, per_node, count in (
        nodes.values_list(
            "node_type__slug", "node_type__gpu_model", "node_type__generation", "node_type__gpus_per_node"
        )
        .annotate(n=Count("id"))
        .order_by()
    ):
        gpus += per_node * count
        value = per_node * count * _perf_ratio(model, workload, overrides, slug, unit)
        perf += value
        pools[generation] += value
    return gpus, round(perf, 2), round(max(pools.values(), default=0.0), 2)


def h100_unit(unit: dict | None, target_row: NodeType | None, workload: str) -> float:
    """One H100's worth in the plan's unit: 1 H100-equivalent, or in a capacity unit the figure of an
    H100 node type it names, else the target's figure over its generations.csv ratio to an H100."""
    if unit is None:
        return 1.0
    for slug in NodeType.objects.filter(gpu_model="H100-SXM5-80GB").values_list("slug", flat=True):
        if slug in unit["per_gpu"]:
            return float(unit["per_gpu"][slug])
    if target_row is not None and target_row.slug in unit["per_gpu"]:
        ratio = _perf_ratio(target_row.gpu_model, workload)
        return float(unit["per_gpu"][target_row.slug]) / ratio if ratio else 1.0
    return 1.0


def default_deliveries(start: date, units: int, horizon_weeks: int) -> list[dict]:
    """``units`` scalable units on delivery dates 8 weeks apart from week 4 up to half the horizon:
    one a date while there are dates enough, else spread evenly (earlier dates take the remainder)."""
    last_week = max(FIRST_DELIVERY_WEEK, horizon_weeks // 2)
    slots = max(1, (last_week - FIRST_DELIVERY_WEEK) // WEEKS_BETWEEN_DELIVERIES + 1)
    dates = max(1, min(units, slots))
    base, extra = divmod(units, dates)
    return [
        {
            "date": (start + timedelta(weeks=FIRST_DELIVERY_WEEK + i * WEEKS_BETWEEN_DELIVERIES)).isoformat(),
            "scalable_units": base + (1 if i < extra else 0),
            "racks_per_unit": RACKS_PER_SCALABLE_UNIT,
            "label": f"SU{i + 1}" if base + (1 if i < extra else 0) == 1 else f"delivery {i + 1}",
        }
        for i in range(dates)
    ]


def _unit_source(unit: dict) -> str:
    return f"{unit['label']}: {unit.get('source') or 'operator input'}"


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(str(value))
    except ValueError:
        return False
    return True


def default_parameters(
    *,
    start: date | None = None,
    halls: list[str] | None = None,
    workload: str = DEFAULT_WORKLOAD,
    floor_unit: str = DEFAULT_FLOOR_UNIT,
    target_slug: str = DEFAULT_TARGET,
    perf_overrides: dict | None = None,
    capacity_unit: dict | None = None,
    horizon_weeks: int = 104,
) -> dict:
    """The defaults over the inventory of ``halls`` (default: every hall); the console form's prefill.

    The floor is today's in-service capacity in ``floor_unit``; the deliveries are as many 8-rack
    scalable units of the target as bring 9/8 of it, spread over the first half of the horizon.
    """
    start = start or next_monday()
    if halls is None:
        halls = list(Hall.objects.order_by("site__name", "name").values_list("id", flat=True))
    unit = capacity_unit if floor_unit == "capacity_unit" else None
    gpus, perf, pool = current_capacity(halls, workload, perf_overrides, unit=unit)
    air_racks = list(
        Rack.objects.filter(hall_id__in=halls, cooling__in=["air", "rear_door"], nodes__isnull=False)
        .distinct()
        .order_by("hall__name", "row", "column", "name")
        .values_list("name", flat=True)
    )
    cdu = air_racks[-DEFAULT_CDU_POSITIONS:]
    target_row = NodeType.objects.filter(slug=target_slug).first() or NodeType.objects.get(slug=DEFAULT_TARGET)
    try:
        target = planner_inputs.NodeTypeSpec.from_reference(target_row.gpu_model, workload=workload)  # type: ignore[arg-type]
        per_gpu, per_rack = target.perf_per_gpu, target.gpus_per_rack
    except (KeyError, ValueError):  # no rack figure: size by nodes; build_inputs reports what is missing
        per_gpu, per_rack = 1.0, target_row.gpus_per_node
    if unit is not None:
        per_gpu = float(unit["per_gpu"].get(target_row.slug, 0.0)) or per_gpu
    want = (gpus if floor_unit == "gpus" else perf) * DEFAULT_GROWTH
    per_gpu = 1.0 if floor_unit == "gpus" else per_gpu
    racks = max(1, math.ceil(want / per_gpu / per_rack - 1e-9))
    units = max(1, math.ceil(racks / RACKS_PER_SCALABLE_UNIT))
    job = max(1, int(pool * DEFAULT_JOB_FRACTION / h100_unit(unit, target_row, workload)))
    return {
        "name": f"Migration to {target_row.slug}",
        "start": start.isoformat(),
        "halls": [str(h) for h in halls],
        "target_node_type": target_row.slug,
        "target_perf_per_gpu": None,
        "perf_overrides": dict(perf_overrides or {}),
        "workload": workload,
        "floor_unit": floor_unit,
        "hall_facilities": [],
        "deliveries": default_deliveries(start, units, horizon_weeks),
        "burn_in_days": None,
        "cut_over_days": 1,
        "drain_days": 7,
        "sanitise_days": 7,
        "ship_days": 7,
        "facility_upgrades": [
            {
                "kind": "cdu_install",
                "positions": cdu,
                "earliest_start": start.isoformat(),
                "lead_time_days": None,
                "power_kw_after": None,
                "cooling_kw_after": None,
            }
        ]
        if cdu
        else [],
        "capacity_floor_gpus": gpus if floor_unit == "gpus" else 0,
        "capacity_floor_perf": perf if floor_unit != "gpus" else None,
        "largest_job_gpus": job,
        "horizon_weeks": horizon_weeks,
        "power_margin": 0.05,
    }


def validate_parameters(given: dict) -> tuple[dict, planner_inputs.PlanInputs]:
    """Validated parameters → (canonical complete parameters, planner inputs); raises ``PlanInputError``.

    ``given`` is JSON-ready: a request body or form checked by ``PlanParametersSerializer``
    (``planning.api.serializers.plan_parameters``), or parameters built by the product itself
    (a capacity plan's gap). The checks here are the ones that need the inventory or more than
    one field: defaults, deliveries after the start, racks and halls that exist.
    """
    start = date.fromisoformat(given["start"]) if "start" in given else next_monday()
    unit = given.get("capacity_unit")
    floor_unit = given.get("floor_unit", "capacity_unit" if unit else DEFAULT_FLOOR_UNIT)
    if floor_unit == "capacity_unit" and not unit:
        raise PlanInputError(
            [
                {
                    "field": "floor_unit",
                    "message": "floor_unit capacity_unit needs capacity_unit (its label and per_gpu).",
                }
            ]
        )
    params = default_parameters(
        start=start,
        halls=given.get("halls"),
        workload=given.get("workload", DEFAULT_WORKLOAD),
        floor_unit=floor_unit,
        target_slug=given.get("target_node_type", DEFAULT_TARGET),
        perf_overrides=given.get("perf_overrides"),
        capacity_unit=unit,
        horizon_weeks=given.get("horizon_weeks", 104),
    )
    params["floor_unit"] = floor_unit
    if "positions" in given and "capacity_floor_gpus" not in given and "capacity_floor_perf" not in given:
        # A narrower scope: the default floor is that scope's capacity, not the halls'.
        gpus, perf, _ = current_capacity(
            params["halls"],
            params["workload"],
            params["perf_overrides"],
            given["positions"],
            unit if floor_unit == "capacity_unit" else None,
        )
        params["capacity_floor_gpus"] = gpus if floor_unit == "gpus" else 0
        params["capacity_floor_perf"] = perf if floor_unit != "gpus" else None
    params.update({k: v for k, v in given.items()})
    if not params.get("name"):
        params["name"] = f"Migration to {params['target_node_type']}"
    if "positions" not in given:
        params.pop("positions", None)
    errors: list[dict] = []
    start_s = params["start"]
    for i, d in enumerate(params["deliveries"]):
        if d["date"] < start_s:
            errors.append(
                {
                    "field": f"deliveries[{i}].date",
                    "message": f"Deliveries must arrive on or after the start ({start_s}).",
                }
            )
    if errors:
        raise PlanInputError(errors)
    # Resolving against the inventory finds the remaining errors (unknown halls, racks, node types).
    return params, build_inputs(params)


def build_inputs(params: dict) -> planner_inputs.PlanInputs:
    """Complete parameters (from ``validate_parameters``) + inventory rows → ``PlanInputs``."""
    errors: list[dict] = []
    start = date.fromisoformat(params["start"])
    hall_rows = {str(h.id): h for h in Hall.objects.filter(id__in=params["halls"]).select_related("site")}
    # The planner names halls in charts and fixes: give it "site/hall", unique like the id.
    hall_label = {hid: str(h) for hid, h in hall_rows.items()}
    for i, hall_id in enumerate(params["halls"]):
        if hall_id not in hall_rows:
            errors.append({"field": f"halls[{i}]", "message": f"No hall {hall_id}; list halls in the console (Fleet)."})
    target_row = NodeType.objects.filter(slug=params["target_node_type"]).first()
    if target_row is None:
        errors.append(
            {
                "field": "target_node_type",
                "message": f"No node type {params['target_node_type']!r} in the catalogue; e.g. {DEFAULT_TARGET}.",
            }
        )
    racks = list(Rack.objects.filter(hall_id__in=hall_rows).order_by("hall__name", "row", "column", "name"))
    by_id = {str(r.id): r for r in racks}
    by_name = {r.name: r for r in racks}
    if "positions" in params:
        racks = _resolve_racks(params["positions"], by_id, by_name, "positions", errors)
        by_id = {str(r.id): r for r in racks}
        by_name = {r.name: r for r in racks}
    if not racks and not errors:
        errors.append(
            {"field": "halls", "message": "The halls in scope have no rack positions; add racks or choose other halls."}
        )
    upgrades: dict[str, planner_inputs.FacilityUpgrade] = {}
    liquid = parameter("liquid_rack_capacity")
    for i, up in enumerate(params.get("facility_upgrades") or []):
        field = f"facility_upgrades[{i}]"
        targets = _resolve_racks(up["positions"], by_id, by_name, f"{field}.positions", errors)
        after_power = up.get("power_kw_after")
        after_power = float(liquid.high) if after_power is None else after_power
        after_cooling = up.get("cooling_kw_after")
        after_cooling = after_power if after_cooling is None else after_cooling
        earliest = date.fromisoformat(up.get("earliest_start") or params["start"])
        for rack in targets:
            if str(rack.id) in upgrades:
                errors.append(
                    {
                        "field": f"{field}.positions",
                        "message": f"{rack.name} already has an upgrade; give each position one.",
                    }
                )
                continue
            adds_power = max(0.0, after_power - float(rack.rated_power_kw))
            adds_cooling = max(0.0, after_cooling - float(rack.cooling_capacity_kw))
            if up.get("lead_time_days") is None:
                upgrade = planner_inputs.FacilityUpgrade.cdu_install(
                    earliest_start=earliest, adds_power_kw=adds_power, adds_cooling_kw=adds_cooling
                )
            else:
                upgrade = planner_inputs.FacilityUpgrade(
                    kind=up.get("kind", "cdu_install"),
                    lead_time_days=up["lead_time_days"],
                    earliest_start=earliest,
                    adds_power_kw=adds_power,
                    adds_cooling_kw=adds_cooling,
                )
            upgrades[str(rack.id)] = upgrade
    target = None
    workload = params.get("workload", DEFAULT_WORKLOAD)
    overrides = params.get("perf_overrides") or {}
    unit = params.get("capacity_unit") if params.get("floor_unit") == "capacity_unit" else None
    if target_row is not None:
        override = params.get("target_perf_per_gpu")
        source = OVERRIDE_SOURCE if override is not None else None
        if unit is not None:
            override, source = unit["per_gpu"].get(target_row.slug), _unit_source(unit)
            if override is None:
                errors.append(
                    {
                        "field": "capacity_unit.per_gpu",
                        "message": f"Give {target_row.slug}'s {unit['label']} per GPU (the target node type).",
                    }
                )
        try:
            target = planner_inputs.NodeTypeSpec.from_reference(
                target_row.gpu_model,
                name=target_row.slug,
                workload=workload,
                perf_per_gpu=override,
                perf_source=source,
            )
        except (KeyError, ValueError) as exc:
            errors.append({"field": "target_node_type", "message": f"{target_row.slug} cannot be planned: {exc}"})
    fleet, kept = _fleet_blocks([r.id for r in racks], target_row, errors, workload, overrides, target, unit)
    if errors:
        raise PlanInputError(errors)
    positions = tuple(
        planner_inputs.Position(
            str(r.id),
            hall_label[str(r.hall_id)],
            r.name,
            r.cooling,
            float(r.rated_power_kw),
            float(r.cooling_capacity_kw),
            upgrades.get(str(r.id)),
        )
        for r in racks
    )
    hall_ids = {p.hall_id for p in positions}
    facilities: dict[str, dict] = {}
    for i, fac in enumerate(params.get("hall_facilities") or []):
        if str(fac["hall"]) not in hall_rows:
            raise PlanInputError(
                [
                    {
                        "field": f"hall_facilities[{i}].hall",
                        "message": "That hall is not in scope; list it in halls first.",
                    }
                ]
            )
        facilities[str(fac["hall"])] = fac
    halls = tuple(
        planner_inputs.Hall(
            hall_label[hid],
            hall_label[hid],
            float(h.it_power_budget_kw),
            float(h.pue),
            cdu_units=facilities.get(hid, {}).get("cdu_units"),
            cdu_unit_kw=facilities.get(hid, {}).get("cdu_unit_kw"),
            air_cooling_kw=facilities.get(hid, {}).get("air_cooling_kw"),
            floor_load_kpa=facilities.get(hid, {}).get("floor_load_kpa"),
        )
        for hid, h in hall_rows.items()
        if hall_label[hid] in hall_ids
    )
    assert target is not None
    delivered = sum(d["scalable_units"] * d["racks_per_unit"] for d in params["deliveries"])
    if delivered > len(racks):
        # More racks than positions can never all land; refusing here also bounds the planner's work.
        raise PlanInputError(
            [
                {
                    "field": "deliveries",
                    "message": (
                        f"The deliveries bring {delivered:,} racks but the scope has only {len(racks):,} positions: "
                        "add halls or positions to the scope, or deliver fewer racks."
                    ),
                }
            ]
        )
    deliveries = tuple(
        planner_inputs.Delivery(
            date.fromisoformat(d["date"]),
            d["scalable_units"],
            d["racks_per_unit"] * target.nodes_per_rack,
            d.get("label", ""),
        )
        for d in params["deliveries"]
    )
    steps = tuple(
        planner_inputs.FloorStep(date.fromisoformat(step["start"]), float(step["perf"]))
        for step in params.get("capacity_floor_schedule") or []
    )
    job = params["largest_job_gpus"]
    return planner_inputs.PlanInputs(
        start=start,
        halls=halls,
        positions=positions,
        fleet=fleet,
        target=target,
        deliveries=deliveries,
        capacity_floor_gpus=params["capacity_floor_gpus"],
        largest_job_gpus=params["largest_job_gpus"],
        kept=kept,
        workload=workload,
        capacity_floor_perf=None if steps else params.get("capacity_floor_perf"),
        floor_steps=steps,
        perf_unit=unit["label"] if unit is not None else "",
        largest_job_perf=job * h100_unit(unit, target_row, workload),
        horizon_weeks=params["horizon_weeks"],
        burn_in_days=params.get("burn_in_days"),
        cut_over_days=params["cut_over_days"],
        drain_days=params["drain_days"],
        sanitise_days=params["sanitise_days"],
        ship_days=params["ship_days"],
        power_margin=params["power_margin"],
    )


def _fleet_blocks(
    rack_ids: list,
    target_row: NodeType | None,
    errors: list[dict],
    workload: str,
    overrides: dict,
    target: planner_inputs.NodeTypeSpec | None,
    unit: dict | None = None,
) -> tuple[tuple[planner_inputs.FleetBlock, ...], tuple[planner_inputs.FleetBlock, ...]]:
    """The fleet in scope, one block per (node type, nodes per rack), racks in inventory order:
    (what migrates, what already is the target generation and stays)."""
    counts: Counter = Counter()
    types: dict[str, NodeType] = {}
    per_rack: dict[str, set[str]] = defaultdict(set)
    nodes = (
        Node.objects.filter(rack_id__in=rack_ids)
        .exclude(lifecycle__in=GONE)
        .select_related("node_type")
        .only("rack_id", "node_type")
    )
    for node in nodes:
        counts[(str(node.rack_id), node.node_type.slug)] += 1
        types[node.node_type.slug] = node.node_type
        per_rack[str(node.rack_id)].add(node.node_type.slug)
    mixed = sorted(rid for rid, slugs in per_rack.items() if len(slugs) > 1)
    if mixed:
        errors.append(
            {
                "field": "positions",
                "message": f"{len(mixed)} racks hold more than one node type (e.g. {mixed[0]}); "
                "leave them out of the scope or plan them separately.",
            }
        )
        return (), ()
    groups: dict[tuple[str, int], list[str]] = defaultdict(list)
    order = {str(rid): i for i, rid in enumerate(rack_ids)}
    for (rack_id, slug), n in sorted(counts.items(), key=lambda kv: order[kv[0][0]]):
        groups[(slug, n)].append(rack_id)
    blocks, kept = [], []
    for (slug, per), rack_list in groups.items():
        row = types[slug]
        if target_row is not None and slug == target_row.slug and target is not None:
            # Already the target generation: stays, occupies its rack, draws power, counts as capacity.
            kept.append(planner_inputs.FleetBlock(f"{slug}x{per}", target, per * len(rack_list), tuple(rack_list)))
            continue
        try:
            override = overrides.get(slug)
            source = OVERRIDE_SOURCE if override is not None else None
            if unit is not None:
                override, source = unit["per_gpu"].get(slug), _unit_source(unit)
                if override is None:
                    errors.append(
                        {
                            "field": "capacity_unit.per_gpu",
                            "message": f"Give {slug}'s {unit['label']} per GPU: the scope holds {slug} nodes.",
                        }
                    )
                    continue
            spec = planner_inputs.NodeTypeSpec.from_reference(
                row.gpu_model,
                name=slug,
                nodes_per_rack=per,
                workload=workload,  # type: ignore[arg-type]
                perf_per_gpu=override,
                perf_source=source,
            )
        except (KeyError, ValueError) as exc:
            errors.append({"field": "positions", "message": f"{slug} in the scope cannot be planned: {exc}"})
            continue
        blocks.append(planner_inputs.FleetBlock(f"{slug}x{per}", spec, per * len(rack_list), tuple(rack_list)))
    return tuple(blocks), tuple(kept)
