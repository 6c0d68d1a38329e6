"""The weekly simulation (land, burn in, drain as the floors allow, release) and the timeline
and phases built from it. Linear in racks: loads are per-hall difference arrays with cached
suffix maxima and free positions wait in per-hall heaps."""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, timedelta
from itertools import accumulate

from planning.engines.migration.context import NewRack, OldRack, PlanContext
from planning.engines.migration.facility import heat_split
from planning.engines.migration.inputs import (
    DECOMMISSION_FIRST,
    EPS,
    ONE_FOR_ONE_SWAP,
    PLAN,
    FleetBlock,
    NodeTypeSpec,
    Position,
)
from planning.engines.migration.results import Phase, Timeline, TimelinePoint

# How often a replay reports progress: about every 1/PROGRESS_STEPS of the horizon.
PROGRESS_STEPS = 20


@dataclass
class Run:
    old: list[OldRack]
    new: list[NewRack]
    kept: list[OldRack]
    power: dict[str, list[float]]
    liquid: dict[str, list[float]]
    air: dict[str, list[float]]


def old_racks_of(blocks: tuple[FleetBlock, ...], positions: dict[str, Position]) -> list[OldRack]:
    racks: list[OldRack] = []
    for block in blocks:
        spec = block.node_type
        if block.count > len(block.position_ids) * spec.nodes_per_rack:
            raise ValueError(f"block {block.id}: {block.count} nodes do not fit {len(block.position_ids)} positions")
        left = block.count
        for pid in block.position_ids:
            nodes = min(left, spec.nodes_per_rack)
            if nodes == 0:
                break
            left -= nodes
            racks.append(OldRack(f"{block.id}/{pid}", block, nodes, positions[pid], spec.rack_power_kw(nodes)))
    return racks


def new_racks_of(ctx: PlanContext) -> list[NewRack]:
    spec = ctx.inputs.target
    racks: list[NewRack] = []
    for i, delivery in enumerate(sorted(ctx.inputs.deliveries, key=lambda d: d.date)):
        left = delivery.nodes
        k = 0
        while left > 0:
            nodes = min(left, spec.nodes_per_rack)
            left -= nodes
            k += 1
            racks.append(
                NewRack(f"D{i + 1}-{k:03d}", delivery, ctx.week_of(delivery.date), nodes, spec.rack_power_kw(nodes))
            )
    return racks


class HallLoad:
    """Per-hall load over the horizon built from steps that last to its end."""

    def __init__(self, halls, horizon: int):
        self.H = horizon
        self.diff = {h: [0.0] * (horizon + 1) for h in halls}
        self.suffix_max: dict[str, list[float] | None] = dict.fromkeys(halls)

    def step(self, hall_id: str, start: int, kw: float) -> None:
        self.diff[hall_id][max(0, start)] += kw
        self.suffix_max[hall_id] = None

    def _level(self, hall_id: str) -> list[float]:
        return list(accumulate(self.diff[hall_id][: self.H]))

    def peak_from(self, hall_id: str, week: int) -> float:
        cached = self.suffix_max[hall_id]
        if cached is None:
            cached = list(accumulate(reversed(self._level(hall_id)), max))[::-1]
            self.suffix_max[hall_id] = cached
        return cached[week]

    def levels(self) -> dict[str, list[float]]:
        return {h: self._level(h) for h in self.diff}


class FloorTracker:
    """Capacity in service during the current week, kept incrementally so each drain check is O(generations)."""

    def __init__(self, ctx: PlanContext):
        self.ctx = ctx
        self.gpus: dict[str, int] = defaultdict(int)
        self.perf = 0.0
        self._total = 0

    def add(self, generation: str, gpus: int, perf: float) -> None:
        self.gpus[generation] += gpus
        self._total += gpus
        self.perf += perf

    def total(self) -> int:
        return self._total

    def may_drain(self, rack: OldRack) -> bool:
        ctx = self.ctx
        gen = rack.block.node_type.generation
        if self.total() - rack.gpus < ctx.floor_gpus:
            return False
        if ctx.floor_perf is not None and self.perf - rack.perf < ctx.floor_perf - 1e-6:
            return False
        job = ctx.inputs.largest_job_gpus
        if job > 0:
            pool = max((n - rack.gpus if g == gen else n) for g, n in self.gpus.items())
            if pool < job:
                return False
        return True

    def headroom_below(self, gpus: int, perf: float) -> bool:
        """True when no rack of at least ``gpus``/``perf`` can leave without breaking a floor."""
        ctx = self.ctx
        if self.total() - gpus < ctx.floor_gpus:
            return True
        return ctx.floor_perf is not None and self.perf - perf < ctx.floor_perf - 1e-6


def simulate(ctx: PlanContext, policy: str, progress: Callable[[float], None] | None = None) -> Run:
    """Replay ``policy`` week by week; every placement respects eligibility, space, power and cooling.

    ``progress`` is told the fraction of weeks replayed (0..1), about every 5 %."""
    H = ctx.horizon
    inputs = ctx.inputs
    target = inputs.target
    fac = ctx.facility
    positions = {p.id: p for p in inputs.positions}
    old = old_racks_of(inputs.fleet, positions)
    kept = old_racks_of(inputs.kept, positions)
    new = new_racks_of(ctx)
    # Every load is a step from some week to the end of the horizon, so each hall keeps one
    # difference array per resource (O(1) per change) and rebuilds its suffix maxima only when a
    # room check finds them stale.
    power = HallLoad(ctx.halls, H)
    liquid = HallLoad(ctx.halls, H)
    air = HallLoad(ctx.halls, H)
    cdu_cap = {h: hall.cdu_usable_kw for h, hall in ctx.halls.items()}
    air_cap = {h: hall.air_cooling_kw for h, hall in ctx.halls.items()}
    order = {p.id: i for i, p in enumerate(inputs.positions)}
    occupied: set[str] = set()
    floors = FloorTracker(ctx)

    def add_load(hall_id: str, spec: NodeTypeSpec, kw: float, start: int, end: int, sign: float = 1.0) -> None:
        assert end >= H  # every load runs to the end of the horizon
        if start >= H:
            return
        lq, ar = heat_split(spec, kw, fac)
        power.step(hall_id, start, sign * kw)
        liquid.step(hall_id, start, sign * lq)
        air.step(hall_id, start, sign * ar)

    for rack in (*old, *kept):
        occupied.add(rack.position.id)
        add_load(rack.position.hall_id, rack.block.node_type, rack.power_kw, 0, H)
        floors.add(rack.block.node_type.generation, rack.gpus, rack.perf)

    # Positions that can take a new rack enter their hall's heap the week they are eligible and empty.
    # Key: never-occupied positions first (no wait for a drain), then inventory order.
    pending: dict[int, list[tuple[tuple[bool, int], str]]] = defaultdict(list)
    heaps: dict[str, list[tuple[tuple[bool, int], str]]] = {h: [] for h in ctx.halls}
    for pos in inputs.positions:
        week = ctx.eligible_week[pos.id]
        if week is not None and pos.id not in occupied and week < H:
            pending[week].append(((False, order[pos.id]), pos.id))
    service_add: dict[int, list[NewRack]] = defaultdict(list)

    def drain(rack: OldRack, week: int) -> None:
        rack.drain_week = week
        spec = rack.block.node_type
        add_load(rack.position.hall_id, spec, rack.power_kw, week + ctx.power_release_weeks, H, -1.0)
        floors.add(spec.generation, -rack.gpus, -rack.perf)
        eligible = ctx.eligible_week[rack.position.id]
        if eligible is not None:
            free = max(eligible, week + ctx.space_release_weeks)
            if free < H:
                pending[free].append(((True, order[rack.position.id]), rack.position.id))

    lq_need, air_need = heat_split(target, target.rack_power_kw(target.nodes_per_rack), fac)

    def room(hall_id: str, week: int, rack: NewRack) -> str:
        """'' when the hall can carry ``rack`` from ``week`` on, else what it lacks."""
        lq, ar = heat_split(target, rack.power_kw, fac)
        if power.peak_from(hall_id, week) + rack.power_kw > ctx.usable_kw[hall_id] + EPS:
            return "no hall power room"
        cap = cdu_cap[hall_id]
        if cap is not None and lq > 0 and liquid.peak_from(hall_id, week) + lq > cap + EPS:
            return "no CDU capacity left in the hall (N+1)"
        cap = air_cap[hall_id]
        if cap is not None and air.peak_from(hall_id, week) + ar > cap + EPS:
            return "no room-air cooling left in the hall"
        return ""

    def land(rack: NewRack, pos: Position, week: int) -> None:
        rack.position, rack.land_week = pos, week
        occupied.add(pos.id)
        add_load(pos.hall_id, target, rack.power_kw, week, H)
        service = week + ctx.service_weeks
        if service <= week:
            floors.add(
                target.generation,
                rack.nodes * target.gpus_per_node,
                rack.nodes * target.gpus_per_node * target.perf_per_gpu,
            )
        elif service < H:
            service_add[service].append(rack)

    halls_with_eligible = {p.hall_id for p in inputs.positions if ctx.eligible_week[p.id] is not None}
    drain_order = sorted(
        old,
        key=lambda r: (
            ctx.eligible_week[r.position.id] is None,
            ctx.eligible_week[r.position.id] or 0,
            r.position.hall_id not in halls_with_eligible,
            order[r.position.id],
        ),
    )
    swap_positions = [r for r in drain_order if ctx.eligible_week[r.position.id] is not None]
    swap_next = 0
    undrained = list(drain_order)
    min_gpus = min((r.gpus for r in old), default=0)
    min_perf = min((r.perf for r in old), default=0.0)
    waiting: list[NewRack] = []
    due: dict[int, list[NewRack]] = defaultdict(list)
    for rack in new:
        if rack.due_week < H:
            due[rack.due_week].append(rack)
        else:
            rack.wait_reason = "delivered after the horizon"
    eligible_untaken = 0  # eligible-by-now positions without a new rack (for wait reasons)
    eligible_from: dict[int, int] = defaultdict(int)
    for pos in inputs.positions:
        week = ctx.eligible_week[pos.id]
        if week is not None:
            eligible_from[min(week, H)] += 1

    report_every = max(1, H // PROGRESS_STEPS)
    for w in range(H):
        if progress is not None and w % report_every == 0:
            progress(w / H)
        eligible_untaken += eligible_from.get(w, 0)
        for rack in service_add.pop(w, ()):
            floors.add(
                target.generation,
                rack.nodes * target.gpus_per_node,
                rack.nodes * target.gpus_per_node * target.perf_per_gpu,
            )
        if policy == DECOMMISSION_FIRST and w == 0:
            for rack in old:
                drain(rack, 0)
            undrained = []
        arrivals = due.pop(w, [])
        if policy == ONE_FOR_ONE_SWAP:
            for rack in arrivals:
                if swap_next < len(swap_positions):
                    rack.swap = swap_positions[swap_next]
                    swap_next += 1
                    drain(rack.swap, w)
        for item in pending.pop(w, ()):
            heapq.heappush(heaps[positions[item[1]].hall_id], item)
        waiting.extend(arrivals)
        if policy == ONE_FOR_ONE_SWAP:
            still = []
            for rack in waiting:
                if rack.swap is None:
                    rack.wait_reason = "no old rack in a position that can take it to swap with"
                    still.append(rack)
                    continue
                pos = rack.swap.position
                eligible = ctx.eligible_week[pos.id]
                drained = rack.swap.drain_week or 0
                if eligible is None or max(eligible, drained + ctx.space_release_weeks) > w:
                    rack.wait_reason = "its swap position is not free or not ready yet"
                    still.append(rack)
                    continue
                reason = room(pos.hall_id, w, rack)
                if reason:
                    rack.wait_reason = reason
                    still.append(rack)
                    continue
                land(rack, pos, w)
                eligible_untaken -= 1
            waiting = still
        else:
            landed = 0
            for rack in waiting:
                best: tuple[tuple[bool, int], str] | None = None
                reasons = []
                for hall_id, heap in heaps.items():
                    if not heap:
                        continue
                    reason = room(hall_id, w, rack)
                    if reason:
                        reasons.append(reason)
                    elif best is None or heap[0] < best:
                        best = heap[0]
                if best is None:
                    if reasons:
                        why = reasons[0]
                    elif eligible_untaken <= 0:
                        why = "no position able to take it yet (facility)"
                    else:
                        why = "eligible positions still hold old racks"
                    for later in waiting[landed:]:
                        later.wait_reason = why
                    break
                pos = positions[best[1]]
                heapq.heappop(heaps[pos.hall_id])
                land(rack, pos, w)
                eligible_untaken -= 1
                landed += 1
            waiting = waiting[landed:]
        if policy == PLAN and undrained:
            if not floors.headroom_below(min_gpus, min_perf):
                left = []
                for i, rack in enumerate(undrained):
                    if floors.headroom_below(min_gpus, min_perf):
                        left.extend(undrained[i:])
                        break
                    if floors.may_drain(rack):
                        drain(rack, w)
                    else:
                        left.append(rack)
                undrained = left
    return Run(old, new, kept, power.levels(), liquid.levels(), air.levels())


def build_timeline(ctx: PlanContext, run: Run) -> Timeline:
    inputs = ctx.inputs
    target = inputs.target
    H = ctx.horizon
    budgets = {h.id: h.it_power_budget_kw for h in inputs.halls}
    generations = sorted({b.node_type.generation for b in (*inputs.fleet, *inputs.kept)} | {target.generation})
    gpus_d = {g: [0] * (H + 1) for g in generations}
    perf_d = {g: [0.0] * (H + 1) for g in generations}

    def span(gen: str, gpus: int, perf: float, start: int, end: int) -> None:
        start, end = max(0, min(H, start)), max(0, min(H, end))
        if start < end:
            gpus_d[gen][start] += gpus
            gpus_d[gen][end] -= gpus
            perf_d[gen][start] += perf
            perf_d[gen][end] -= perf

    for rack in run.old:
        end = H if rack.drain_week is None else rack.drain_week
        span(rack.block.node_type.generation, rack.gpus, rack.perf, 0, end)
    for rack in run.kept:
        span(rack.block.node_type.generation, rack.gpus, rack.perf, 0, H)
    for rack in run.new:
        if rack.land_week is not None:
            g = rack.nodes * target.gpus_per_node
            span(target.generation, g, g * target.perf_per_gpu, rack.land_week + ctx.service_weeks, H)
    points = []
    gpus = dict.fromkeys(generations, 0)
    perf = dict.fromkeys(generations, 0.0)
    for t in range(H):
        for g in generations:
            gpus[g] += gpus_d[g][t]
            perf[g] += perf_d[g][t]
        kw = {h: run.power[h][t] for h in budgets}
        points.append(
            TimelinePoint(
                date=ctx.date_of(t),
                total_gpus=sum(gpus.values()),
                gpus_by_generation=dict(gpus),
                largest_pool_gpus=max(gpus.values()),
                perf_total=round(sum(perf.values()), 6),
                perf_by_generation={g: round(v, 6) for g, v in perf.items()},
                power_kw_by_hall={h: round(v, 6) for h, v in kw.items()},
                power_kw_total=round(sum(kw.values()), 6),
                budget_kw_by_hall=dict(budgets),
                budget_kw_total=sum(budgets.values()),
                facility_power_kw=round(sum(v * ctx.pue[h] for h, v in kw.items()), 6),
            )
        )
    return Timeline(tuple(points))


def build_phases(ctx: PlanContext, run: Run, with_prep: bool) -> tuple[Phase, ...]:
    inputs = ctx.inputs
    target = inputs.target
    d = timedelta
    groups: dict[tuple[str, date, date, str], list[tuple[str, int, int]]] = defaultdict(list)
    if with_prep:
        used = {r.position.id for r in run.new if r.position is not None}
        for pos in inputs.positions:
            if pos.upgrade is not None and pos.id in used and ctx.eligible_week[pos.id]:
                up = pos.upgrade
                groups[("facility_prep", up.earliest_start, up.ready, up.kind)].append((pos.id, 0, 0))
    for rack in run.new:
        if rack.land_week is None or rack.position is None:
            continue
        land = ctx.date_of(rack.land_week)
        waited = rack.land_week - rack.due_week
        note = f"delivery {rack.delivery.date} {rack.delivery.label}".rstrip()
        if waited:
            note += f"; waited {waited} weeks: {rack.wait_reason}"
        item = (rack.position.id, rack.nodes, rack.nodes * target.gpus_per_node)
        burn_end = land + d(days=ctx.burn_in_days)
        service = ctx.date_of(rack.land_week + ctx.service_weeks)
        groups[("land", land, land, note)].append(item)
        groups[("burn_in", land, burn_end, "draws full power, delivers nothing")].append(item)
        groups[("cut_over", burn_end, service, "in service from the end date")].append(item)
    for rack in run.old:
        if rack.drain_week is None:
            continue
        start = ctx.date_of(rack.drain_week)
        drained = start + d(days=inputs.drain_days)
        sanitised = drained + d(days=inputs.sanitise_days)
        shipped = sanitised + d(days=inputs.ship_days)
        item = (rack.position.id, rack.nodes, rack.gpus)
        groups[("drain", start, drained, f"block {rack.block.id}")].append(item)
        groups[("sanitise", drained, sanitised, "NIST SP 800-88 record per drive; still draws power")].append(item)
        groups[("ship", sanitised, shipped, "frees the position")].append(item)
    rank = {k: i for i, k in enumerate(("facility_prep", "land", "burn_in", "cut_over", "drain", "sanitise", "ship"))}
    phases = [
        Phase(kind, start, end, tuple(i[0] for i in items), sum(i[1] for i in items), sum(i[2] for i in items), note)  # type: ignore[arg-type]
        for (kind, start, end, note), items in groups.items()
    ]
    return tuple(sorted(phases, key=lambda p: (p.start, rank[p.kind], p.end, p.notes)))
