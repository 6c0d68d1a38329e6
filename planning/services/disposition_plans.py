"""Disposition plans: pick outgoing nodes, value the four options, store the split.

The valuation itself is pure (`disposition_valuation`); this module turns the inventory into
`OutgoingBlock`s, applies the plan's assumption overrides to the reference defaults, and stores
what `recommend_split` answers together with a per-node assignment.
"""

import dataclasses
from dataclasses import dataclass, field
from datetime import date
from decimal import Decimal

from django.db import transaction
from django.db.models import Count
from django.utils import timezone

from core.services.audit import record_audit
from fleet.choices import Lifecycle
from fleet.models import Drive, Node, Rack
from planning.engines.disposition.assumptions import load_default_assumptions
from planning.engines.disposition.market import Market, load_market, override_market
from planning.engines.disposition.split import recommend_split
from planning.engines.disposition.types import (
    OPTION_ORDER,
    Assumptions,
    InternalDemand,
    OptionValue,
    OutgoingBlock,
    to_cents,
)
from planning.engines.disposition.valuation import value_options
from planning.engines.migration.planner import power_reuse
from planning.models import DispositionAssignment, DispositionPlan, MigrationPlan
from planning.plan_json import inputs_from_json, schedule_from_json
from planning.selectors import drain_starts

CHANNELS = ("broker", "auction", "distressed")
# Nodes already on their way out or gone cannot be planned again.
EXCLUDED_STATES = (Lifecycle.RETIRED, Lifecycle.DISPOSED)
# Scalar Decimal assumptions an operator may override per plan (mappings stay as referenced).
OVERRIDABLE = tuple(f.name for f in dataclasses.fields(Assumptions) if f.type in (Decimal, "Decimal"))
DAYS_PER_YEAR = Decimal("365.25")


class SelectionError(ValueError):
    """A selection that names nothing, or names something that does not exist."""


@dataclass(frozen=True)
class Selection:
    """Which nodes go out. Filters combine (AND); `node_ids` alone picks exactly those."""

    generation: str = ""
    gpu_model: str = ""
    hall_id: str = ""
    min_age_years: Decimal | None = None
    node_ids: list = field(default_factory=list)
    migration_plan_id: str = ""


def default_assumptions() -> Assumptions:
    return load_default_assumptions()


def apply_overrides(base: Assumptions, overrides: dict[str, Decimal], reason: str = "") -> Assumptions:
    unknown = set(overrides) - set(OVERRIDABLE)
    if unknown:
        raise SelectionError(f"cannot override {', '.join(sorted(unknown))}; overridable: {', '.join(OVERRIDABLE)}")
    if overrides and not reason.strip():
        raise SelectionError("say why the defaults are overridden (override_reason)")
    sources = dict(base.sources)
    for name in overrides:
        sources[name] = f"overridden in this plan ({reason.strip()}); default {getattr(base, name)}"
    return dataclasses.replace(base, **overrides, sources=sources)


MONTH_DAYS = Decimal("30.4375")  # 365.25 / 12


@dataclass(frozen=True)
class Coherence:
    """What a linked migration plan does with one node: drains it (so it cannot be kept in
    place), or keeps it in a hall it refills from some month (so keeping it blocks kW there)."""

    kept_in_place: bool = True
    blocked_from_month: Decimal | None = None
    group: str = ""
    drain: date | None = None
    position_reused: date | None = None


def migration_coherence(plan: MigrationPlan, nodes: list[dict], start: date) -> dict:
    """node id → Coherence, from the migration plan's stored output (its drain phases and where
    its new racks land), without re-planning."""
    drains = drain_starts(plan)
    landed: dict[str, date] = {}
    for pl in plan.result.get("placements", []):
        day = date.fromisoformat(pl["land"])
        landed[pl["position_id"]] = min(day, landed.get(pl["position_id"], day))
    hall_of = {str(k): str(v) for k, v in Rack.objects.filter(pk__in=list(landed)).values_list("pk", "hall_id")}
    first_in_hall: dict[str, date] = {}
    for pid, day in landed.items():
        hall = hall_of.get(pid)
        if hall is not None:
            first_in_hall[hall] = min(day, first_in_hall.get(hall, day))
    out = {}
    for n in nodes:
        rack, hall = str(n["rack_id"]), str(n["rack__hall_id"])
        if rack in drains:
            out[n["id"]] = Coherence(False, None, "drained by the migration", drains[rack], landed.get(rack))
        elif hall in first_in_hall:
            months = max(Decimal(0), Decimal((first_in_hall[hall] - start).days) / MONTH_DAYS).quantize(Decimal("0.01"))
            out[n["id"]] = Coherence(True, months, "kept in a hall the migration refills")
        else:
            out[n["id"]] = Coherence()
    return out


def _coherence_text(plan: MigrationPlan, group: list[Coherence], reuse: dict | None, start: date) -> str:
    first = group[0]
    if not first.kept_in_place:
        drains = sorted(c.drain for c in group if c.drain)
        reused = sum(1 for c in group if c.position_reused)
        parts = [f"migration plan {plan.name!r} drains them from {drains[0]} to {drains[-1]}"]
        if reused:
            parts.append(f"{reused} of them stand where its new racks land")
        if reuse and reuse.get("first_reuse"):
            parts.append(f"it reuses the freed kW from {reuse['first_reuse']}")
        return "; ".join(parts)
    if first.blocked_from_month is not None:
        return (
            f"migration plan {plan.name!r} keeps them but lands new racks in their hall from month "
            f"{first.blocked_from_month} after {start}: kept in place they hold kW the new racks could use"
        )
    return ""


def _migration_plan(plan_id: str) -> MigrationPlan:
    plan = MigrationPlan.objects.filter(pk=plan_id).first()
    if plan is None:
        raise SelectionError(f"no migration plan {plan_id}")
    if plan.computation != MigrationPlan.Computation.DONE:
        raise SelectionError(f"migration plan {plan.name!r} is {plan.computation}; link it once it is computed")
    return plan


def _migration_drain_ids(plan_id: str) -> list:
    """The drain list of an applied migration plan."""
    plan = MigrationPlan.objects.filter(pk=plan_id).first()
    if plan is None:
        raise SelectionError(f"no migration plan {plan_id}")
    drain = plan.drain_node_ids()
    if not drain and plan.status != "applied":
        raise SelectionError(f"migration plan {plan.name!r} is not applied yet; apply it to schedule its drain list")
    return drain


def power_reuse_of(plan: MigrationPlan, *, start: date, horizon_months: int) -> dict:
    """What the linked migration plan does with the power its drains free, for this horizon.

    Reads the plan's own schedule: kW freed when each drained rack's sanitisation ends, and the
    part of the new racks' draw that needs it (beyond the hall's spare power), from the week it
    lands. ``kw_months_per_kw`` is the valuation's ``freed_kw_months_per_kw``."""
    inputs = inputs_from_json(plan.inputs["resolved"])
    reuse = power_reuse(inputs, *schedule_from_json(plan.result))  # its stored schedule: no re-planning
    freed = reuse.total_freed_kw
    kw_months = reuse.kw_months(start, horizon_months)
    first = reuse.first_reuse()
    return {
        "migration_plan_id": str(plan.id),
        "freed_kw": round(freed, 1),
        "peak_reused_kw": round(max(reuse.reused_kw, default=0.0), 1),
        "reused_kw_months": round(kw_months, 1),
        "kw_months_per_kw": round(kw_months / freed, 4) if freed > 0 else 0.0,
        "first_reuse": first.isoformat() if first else None,
        "from": start.isoformat(),
        "months": horizon_months,
    }


def select_nodes(selection: Selection):
    qs = Node.objects.exclude(lifecycle__in=EXCLUDED_STATES)
    if selection.migration_plan_id:
        qs = qs.filter(pk__in=_migration_drain_ids(selection.migration_plan_id))
    if selection.node_ids:
        qs = qs.filter(pk__in=selection.node_ids)
    if selection.generation:
        qs = qs.filter(node_type__generation__iexact=selection.generation)
    if selection.gpu_model:
        qs = qs.filter(node_type__gpu_model__icontains=selection.gpu_model)
    if selection.hall_id:
        qs = qs.filter(rack__hall_id=selection.hall_id)
    if selection.min_age_years is not None:
        days = int(selection.min_age_years * DAYS_PER_YEAR)
        qs = qs.filter(commissioned_on__lte=timezone.now().date() - timezone.timedelta(days=days))
    return qs


def _age_years(commissioned_on: date | None, today: date) -> Decimal:
    if commissioned_on is None:
        return Decimal(0)
    return Decimal((today - commissioned_on).days) / DAYS_PER_YEAR


def build_blocks(
    nodes: list[dict], drives_per_node: dict, coherence: dict | None = None, describe=None
) -> tuple[list[OutgoingBlock], dict[str, list]]:
    """Group nodes by GPU model, hall and what a linked migration plan does with them (the
    valuation's block label), averaging their age.

    Returns the blocks and, per block label, its node ids (ordered by hostname) so the split
    can be assigned to concrete nodes."""
    today = timezone.now().date()
    coherence = coherence or {}
    groups: dict[tuple, list[dict]] = {}
    for n in nodes:
        c = coherence.get(n["id"], Coherence())
        key = (n["node_type__gpu_model"], str(n["hall"]), c.group, c.blocked_from_month)
        groups.setdefault(key, []).append(n)
    blocks, members = [], {}
    for (gpu_model, hall, group_name, blocked_from), group in sorted(
        groups.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2], kv[0][3] or Decimal(-1))
    ):
        group.sort(key=lambda n: n["hostname"])
        ages = [_age_years(n["commissioned_on"], today) for n in group]
        racks = len({n["rack_id"] for n in group})
        states = [coherence.get(n["id"], Coherence()) for n in group]
        block = OutgoingBlock(
            generation=group[0]["node_type__generation"],
            gpu_model=gpu_model,
            gpus_per_node=group[0]["node_type__gpus_per_node"],
            nodes=len(group),
            age_years=(sum(ages) / len(ages)).quantize(Decimal("0.01")),
            hall=hall,
            nodes_per_rack=max(1, -(-len(group) // racks)),
            drives_per_node=max((drives_per_node.get(n["id"], 0) for n in group), default=0),
            kept_in_place=states[0].kept_in_place,
            blocked_from_month=blocked_from,
            group=group_name,
            coherence=describe(states) if describe and group_name else "",
        )
        blocks.append(block)
        members[block.label] = [n["id"] for n in group]
    return blocks, members


def _money(x: Decimal) -> str:
    return str(to_cents(x))


def _option_json(v: OptionValue) -> dict:
    return {
        "option": v.option.value,
        "return_per_node": _money(v.return_per_node),
        "operating_margin": _money(v.operating_margin),
        "disposal_proceeds": _money(v.disposal_proceeds),
        "residual_value": _money(v.residual_value),
        "freed_power_value": _money(v.freed_power_value),
        "blocked_value": _money(v.blocked_value),
        "service_months": str(v.service_months),
        "start_month": v.start_month,
        "cash": _money(v.cash),
    }


def _assumptions_json(a: Assumptions) -> list[dict]:
    def plain(value):
        if isinstance(value, Decimal):
            return str(value)
        if isinstance(value, tuple):
            return [plain(v) for v in value]
        if dataclasses.is_dataclass(value):
            return {k: plain(v) for k, v in dataclasses.asdict(value).items()}
        if isinstance(value, dict) or hasattr(value, "items"):
            return {k: plain(v) for k, v in value.items()}
        return value

    return [
        {"name": f.name, "value": plain(getattr(a, f.name)), "source": a.sources.get(f.name, "")}
        for f in dataclasses.fields(a)
        if f.name != "sources"
    ]


def default_market() -> Market:
    return load_market()


def linked_plan_id(selection: Selection, link: str = "") -> str:
    """The migration plan linked to a disposition: the one the selection takes its nodes from,
    or one linked without restricting the selection; both, when given, must agree."""
    chosen = str(selection.migration_plan_id or "")
    link = str(link or "")
    if chosen and link and chosen != link:
        raise SelectionError("selection.migration_plan_id and migration_plan_id name different plans; give one")
    return chosen or link


@transaction.atomic
def create_disposition_plan(
    *,
    name: str,
    selection: Selection,
    demands: list[InternalDemand],
    horizon_months: int,
    channel: str = "broker",
    lease_cap_nodes: int | None = None,
    overrides: dict[str, Decimal] | None = None,
    actor: str,
    inputs: dict | None = None,
    rank_with_freed_power: bool = False,
    lease_on_demand: bool = False,
    market_overrides: dict[str, Decimal] | None = None,
    override_reason: str = "",
    migration_plan_id: str = "",
) -> DispositionPlan:
    """Value the selected nodes, split them under the market bounds, store the plan, its result
    and one assignment per node (with the constraint that decided it).

    The market bounds come from economics.csv unless the operator overrides them, with a reason.
    With a linked migration plan, freed power is valued from that plan's reuse of it (once,
    from when it is reused, capped at what it reuses), the nodes it drains are not kept in
    place, and nodes it keeps in a hall it refills are charged, when kept, for the kW they hold
    there; without one, freed power is worth nothing here."""
    if channel not in CHANNELS:
        raise SelectionError(f"channel must be one of {', '.join(CHANNELS)}")
    assumptions = dataclasses.replace(
        default_assumptions(), rank_with_freed_power=rank_with_freed_power, lease_on_demand=lease_on_demand
    )
    try:
        market = override_market(default_market(), market_overrides or {}, override_reason)
    except ValueError as exc:
        raise SelectionError(str(exc)) from exc
    today = timezone.now().date()
    link = linked_plan_id(selection, migration_plan_id)
    linked = _migration_plan(link) if link else None
    reuse = None
    if linked is not None:
        reuse = power_reuse_of(linked, start=today, horizon_months=horizon_months)
        sources = dict(assumptions.sources)
        sources["freed_kw_months_per_kw"] = (
            f"migration plan {reuse['migration_plan_id']}: {reuse['reused_kw_months']:,} reused kW-months over "
            f"{horizon_months} months from {reuse['from']} (first reuse {reuse['first_reuse']}) / "
            f"{reuse['freed_kw']:,} kW its drains free"
        )
        assumptions = dataclasses.replace(
            assumptions, freed_kw_months_per_kw=Decimal(str(reuse["kw_months_per_kw"])), sources=sources
        )
    assumptions = apply_overrides(assumptions, overrides or {}, override_reason)
    nodes = list(
        select_nodes(selection).values(
            "id",
            "hostname",
            "rack_id",
            "rack__hall_id",
            "commissioned_on",
            "rack__hall__name",
            "node_type__gpu_model",
            "node_type__generation",
            "node_type__gpus_per_node",
        )
    )
    if not nodes:
        raise SelectionError("the selection matches no node that can still be disposed of; widen it")
    for n in nodes:
        n["hall"] = n.pop("rack__hall__name")
    drive_counts = dict(
        Drive.objects.filter(node_id__in=[n["id"] for n in nodes])
        .values("node_id")
        .annotate(n=Count("id"))
        .values_list("node_id", "n")
    )
    coherence = migration_coherence(linked, nodes, today) if linked is not None else {}
    blocks, members = build_blocks(
        nodes, drive_counts, coherence, lambda group: _coherence_text(linked, group, reuse, today)
    )
    try:
        recommendation = recommend_split(blocks, demands, assumptions, horizon_months, channel, lease_cap_nodes, market)
    except ValueError as exc:
        raise SelectionError(str(exc)) from exc

    block_rows = []
    for block in blocks:
        external = value_options(block, None, assumptions, horizon_months, channel, market)
        redeploy = {}
        for d in demands:
            values = value_options(block, d, assumptions, horizon_months, channel, market)
            redeploy[d.pool] = _option_json(values.redeploy)
        block_rows.append(
            {
                "label": block.label,
                "generation": block.generation,
                "gpu_model": block.gpu_model,
                "gpus_per_node": block.gpus_per_node,
                "nodes": block.nodes,
                "age_years": str(block.age_years),
                "hall": block.hall,
                "drives_per_node": block.drives_per_node,
                "kept_in_place": block.kept_in_place,
                "coherence": block.coherence,
                "options": {
                    o.value: _option_json(getattr(external, o.value)) for o in OPTION_ORDER if o.value != "redeploy"
                },
                "redeploy": redeploy,
            }
        )
    allocations = []
    freed_by_option = {o.value: Decimal(0) for o in OPTION_ORDER}
    constraints: dict[str, int] = {}
    assignments = []
    cursor = {label: 0 for label in members}
    for al in recommendation.allocations:
        ids = members[al.block_label][cursor[al.block_label] : cursor[al.block_label] + al.nodes]
        cursor[al.block_label] += al.nodes
        freed_by_option[al.option.value] += al.total_freed_power_value
        constraints[al.decided_by] = constraints.get(al.decided_by, 0) + al.nodes
        allocations.append(
            {
                "block": al.block_label,
                "option": al.option.value,
                "pool": al.pool,
                "nodes": al.nodes,
                "return_per_node": _money(al.total_return / al.nodes),
                "total": _money(al.total_return),
                "cash": _money(al.total_cash),
                "freed_power_value": _money(al.total_freed_power_value),
                "blocked_value": _money(al.total_blocked_value),
                "decided_by": al.decided_by,
                "reason": al.reason,
                "tranches": [
                    {
                        "start_month": t.value.start_month,
                        "nodes": t.nodes,
                        "return_per_node": _money(t.value.return_per_node),
                    }
                    for t in (al.tranches or ())
                ],
            }
        )
        assignments.extend((node_id, al.option.value, al.pool or "", al.decided_by) for node_id in ids)
    result = {
        "horizon_months": horizon_months,
        "channel": channel,
        "currency": "USD",
        "node_count": len(nodes),
        "split": {o.value: recommendation.node_counts[o] for o in OPTION_ORDER},
        "option_returns": {o.value: _money(recommendation.option_returns[o]) for o in OPTION_ORDER},
        "total_return": _money(recommendation.total_return),
        "cash_return": _money(recommendation.total_cash),
        "opportunity_value": _money(recommendation.total_freed_power_value),
        "ranked_by": "cash + freed power" if rank_with_freed_power else "cash",
        "lease_billing": "on demand" if lease_on_demand else "contract",
        "lease_cap_nodes": lease_cap_nodes,
        "market": market.as_list(),
        "override_reason": override_reason.strip(),
        "power_reuse": reuse,
        "migration": _migration_summary(linked, coherence) if linked is not None else None,
        "constraints": dict(sorted(constraints.items())),
        "freed_power_value": {k: _money(v) for k, v in freed_by_option.items()},
        "freed_power_value_per_kw_month": _money(assumptions.freed_power_value_per_kw_month),
        "allocations": allocations,
        "blocks": block_rows,
        "reasoning": list(recommendation.reasoning),
        "assumptions": _assumptions_json(assumptions),
    }
    plan = DispositionPlan.objects.create(name=name, created_by=actor, inputs=inputs or {}, result=result)
    DispositionAssignment.objects.bulk_create(
        [
            DispositionAssignment(plan=plan, node_id=nid, option=opt, pool=pool, constraint=constraint)
            for nid, opt, pool, constraint in assignments
        ],
        batch_size=2000,
    )
    record_audit(
        actor=actor,
        action="disposition_plan.create",
        target=plan,
        after={
            "nodes": len(nodes),
            "split": result["split"],
            "total_return": result["total_return"],
            "market_overrides": {k: str(v) for k, v in (market_overrides or {}).items()},
            "assumption_overrides": {k: str(v) for k, v in (overrides or {}).items()},
            "override_reason": override_reason.strip(),
        },
        reason=override_reason.strip(),
    )
    return plan


def _migration_summary(plan: MigrationPlan, coherence: dict) -> dict:
    states = list(coherence.values())
    return {
        "migration_plan_id": str(plan.id),
        "name": plan.name,
        "drained_nodes": sum(1 for c in states if not c.kept_in_place),
        "positions_reused": sum(1 for c in states if c.position_reused),
        "kept_in_refilled_halls": sum(1 for c in states if c.kept_in_place and c.blocked_from_month is not None),
        "untouched": sum(1 for c in states if c.kept_in_place and c.blocked_from_month is None),
    }
