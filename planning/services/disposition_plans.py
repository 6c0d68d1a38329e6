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
from fleet.models import Drive, Node
from planning.engines.disposition.assumptions import load_default_assumptions
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


def apply_overrides(base: Assumptions, overrides: dict[str, Decimal]) -> Assumptions:
    unknown = set(overrides) - set(OVERRIDABLE)
    if unknown:
        raise SelectionError(f"cannot override {', '.join(sorted(unknown))}; overridable: {', '.join(OVERRIDABLE)}")
    sources = dict(base.sources)
    for name in overrides:
        sources[name] = "overridden in this plan"
    return dataclasses.replace(base, **overrides, sources=sources)


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


def build_blocks(nodes: list[dict], drives_per_node: dict) -> tuple[list[OutgoingBlock], dict[str, list]]:
    """Group nodes by GPU model and hall (the valuation's block label), averaging their age.

    Returns the blocks and, per block label, its node ids (ordered by hostname) so the split
    can be assigned to concrete nodes."""
    today = timezone.now().date()
    groups: dict[tuple, list[dict]] = {}
    for n in nodes:
        groups.setdefault((n["node_type__gpu_model"], str(n["hall"])), []).append(n)
    blocks, members = [], {}
    for (gpu_model, hall), group in sorted(groups.items()):
        group.sort(key=lambda n: n["hostname"])
        ages = [_age_years(n["commissioned_on"], today) for n in group]
        racks = len({n["rack_id"] for n in group})
        block = OutgoingBlock(
            generation=group[0]["node_type__generation"],
            gpu_model=gpu_model,
            gpus_per_node=group[0]["node_type__gpus_per_node"],
            nodes=len(group),
            age_years=(sum(ages) / len(ages)).quantize(Decimal("0.01")),
            hall=hall,
            nodes_per_rack=max(1, -(-len(group) // racks)),
            drives_per_node=max((drives_per_node.get(n["id"], 0) for n in group), default=0),
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
        "service_months": str(v.service_months),
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
) -> DispositionPlan:
    """Value the selected nodes, store the plan, its result and one assignment per node.

    With a linked migration plan, freed power is valued from that plan's reuse of it (once, from
    when it is reused, capped at what it reuses); without one it is worth nothing here."""
    if channel not in CHANNELS:
        raise SelectionError(f"channel must be one of {', '.join(CHANNELS)}")
    assumptions = dataclasses.replace(
        default_assumptions(), rank_with_freed_power=rank_with_freed_power, lease_on_demand=lease_on_demand
    )
    reuse = None
    if selection.migration_plan_id:
        reuse = power_reuse_of(
            _migration_plan(str(selection.migration_plan_id)),
            start=timezone.now().date(),
            horizon_months=horizon_months,
        )
        sources = dict(assumptions.sources)
        sources["freed_kw_months_per_kw"] = (
            f"migration plan {reuse['migration_plan_id']}: {reuse['reused_kw_months']:,} reused kW-months over "
            f"{horizon_months} months from {reuse['from']} (first reuse {reuse['first_reuse']}) / "
            f"{reuse['freed_kw']:,} kW its drains free"
        )
        assumptions = dataclasses.replace(
            assumptions, freed_kw_months_per_kw=Decimal(str(reuse["kw_months_per_kw"])), sources=sources
        )
    assumptions = apply_overrides(assumptions, overrides or {})
    nodes = list(
        select_nodes(selection).values(
            "id",
            "hostname",
            "rack_id",
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
    blocks, members = build_blocks(nodes, drive_counts)
    recommendation = recommend_split(blocks, demands, assumptions, horizon_months, channel, lease_cap_nodes)

    block_rows = []
    for block in blocks:
        external = value_options(block, None, assumptions, horizon_months, channel)
        redeploy = {}
        for d in demands:
            values = value_options(block, d, assumptions, horizon_months, channel)
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
                "options": {
                    o.value: _option_json(getattr(external, o.value)) for o in OPTION_ORDER if o.value != "redeploy"
                },
                "redeploy": redeploy,
            }
        )
    allocations = []
    freed_by_option = {o.value: Decimal(0) for o in OPTION_ORDER}
    assignments = []
    cursor = {label: 0 for label in members}
    for al in recommendation.allocations:
        ids = members[al.block_label][cursor[al.block_label] : cursor[al.block_label] + al.nodes]
        cursor[al.block_label] += al.nodes
        freed_by_option[al.option.value] += al.value.freed_power_value * al.nodes
        allocations.append(
            {
                "block": al.block_label,
                "option": al.option.value,
                "pool": al.pool,
                "nodes": al.nodes,
                "return_per_node": _money(al.value.return_per_node),
                "total": _money(al.total_return),
                "cash": _money(al.value.cash * al.nodes),
                "freed_power_value": _money(al.value.freed_power_value * al.nodes),
            }
        )
        assignments.extend((node_id, al.option.value, al.pool or "") for node_id in ids)
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
        "power_reuse": reuse,
        "freed_power_value": {k: _money(v) for k, v in freed_by_option.items()},
        "freed_power_value_per_kw_month": _money(assumptions.freed_power_value_per_kw_month),
        "allocations": allocations,
        "blocks": block_rows,
        "reasoning": list(recommendation.reasoning),
        "assumptions": _assumptions_json(assumptions),
    }
    plan = DispositionPlan.objects.create(name=name, created_by=actor, inputs=inputs or {}, result=result)
    DispositionAssignment.objects.bulk_create(
        [DispositionAssignment(plan=plan, node_id=nid, option=opt, pool=pool) for nid, opt, pool in assignments],
        batch_size=2000,
    )
    record_audit(
        actor=actor,
        action="disposition_plan.create",
        target=plan,
        after={"nodes": len(nodes), "split": result["split"], "total_return": result["total_return"]},
    )
    return plan
