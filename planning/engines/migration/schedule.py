"""The weekly simulation (land, burn in, drain just in time, release) and the timeline and phases
built from it. Linear in racks: loads are per-hall difference arrays with cached suffix maxima and
free positions wait in per-hall heaps.

Drains are just in time. An old rack drains in week ``w`` only when

* **a delivery needs what it frees**: looking ahead to ``w + power release`` (drain + sanitise)
  and ``w + space release`` (+ ship), a delivered rack that could land then lacks the hall power,
  CDU or room-air capacity the drain frees in its hall, or lacks a position that the drain frees
  and that can take it by then; or
* **the migration is complete**: every delivery has landed and is in service, and the floors hold
  without the rack ("retired").

Either way every floor (now and for every later week) and the largest job still hold after it. A
rack that drains for a delivery records the week its position or kW is first used, so the plan
can show that nothing was drained to sit idle.
"""

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
from planning.engines.migration.results import DrainItem, Phase, Timeline, TimelinePoint

# How often a replay reports progress: about every 1/PROGRESS_STEPS of the horizon.
PROGRESS_STEPS = 20
INF = float("inf")

# Why a delivered rack waits, as the plan's binding constraints name it.
WAIT_POWER = "hall power budget"
WAIT_CDU = "CDU capacity (N+1)"
WAIT_AIR = "room-air cooling"
WAIT_FACILITY = "no position can take it yet (facility upgrade not ready)"
WAIT_HELD = "positions that can take it still hold old racks"
WAIT_FLOOR = "the capacity floor (old racks cannot drain yet)"
WAIT_JOB = "the largest job (old racks cannot drain yet)"
WAIT_SWAP = "its swap position is not free or not ready yet"
WAIT_NO_SWAP = "no old rack in a position that can take it to swap with"
WAIT_AFTER_HORIZON = "delivered after the horizon"

RETIRED = "retired: every delivery is in service and the floors hold without it"


@dataclass
class Run:
    old: list[OldRack]
    new: list[NewRack]
    kept: list[OldRack]
    power: dict[str, list[float]]
    liquid: dict[str, list[float]]
    air: dict[str, list[float]]
    floor_blocked: int = 0


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
    """Per-hall load over the horizon built from steps that last to its end.

    ``credit`` steps (capacity a facility upgrade adds from its ready week) lower the level that
    room checks compare with the hall's base capacity, but not the load reported."""

    def __init__(self, halls, horizon: int):
        self.H = horizon
        self.diff = {h: [0.0] * (horizon + 1) for h in halls}
        self.credit = {h: [0.0] * (horizon + 1) for h in halls}
        self.suffix_max: dict[str, list[float] | None] = dict.fromkeys(halls)

    def step(self, hall_id: str, start: int, kw: float) -> None:
        self.diff[hall_id][max(0, start)] += kw
        self.suffix_max[hall_id] = None

    def add_credit(self, hall_id: str, start: int, kw: float) -> None:
        if start < self.H:
            self.credit[hall_id][max(0, start)] += kw
            self.suffix_max[hall_id] = None

    def _level(self, hall_id: str) -> list[float]:
        return list(accumulate(self.diff[hall_id][: self.H]))

    def peak_from(self, hall_id: str, week: int) -> float:
        """The highest load less credits from ``week`` to the end of the horizon."""
        if week >= self.H:
            return 0.0
        cached = self.suffix_max[hall_id]
        if cached is None:
            net = [a - b for a, b in zip(self._level(hall_id), accumulate(self.credit[hall_id][: self.H]))]
            cached = list(accumulate(reversed(net), max))[::-1]
            self.suffix_max[hall_id] = cached
        return cached[week]

    def levels(self) -> dict[str, list[float]]:
        return {h: self._level(h) for h in self.diff}


class FloorTracker:
    """Capacity in service during the current week, kept incrementally so each drain check is O(generations)."""

    def __init__(self, ctx: PlanContext):
        self.ctx = ctx
        self.gpus: dict[str, int] = defaultdict(int)
        self.perf_by_gen: dict[str, float] = defaultdict(float)
        self.perf = 0.0
        self._total = 0

    def add(self, generation: str, gpus: int, perf: float) -> None:
        self.gpus[generation] += gpus
        self.perf_by_gen[generation] += perf
        self._total += gpus
        self.perf += perf

    def total(self) -> int:
        return self._total

    def refusal(self, rack: OldRack, week: int) -> str:
        """'' when ``rack`` may drain in ``week`` (every floor, now and later, and the largest job hold), else why not."""
        return self.group_refusal((rack,), week)

    def group_refusal(self, racks, week: int) -> str:
        """'' when all of ``racks`` may drain together in ``week``, else why not."""
        ctx = self.ctx
        gpus = sum(r.gpus for r in racks)
        perf = sum(r.perf for r in racks)
        if self.total() - gpus < ctx.floor_gpus:
            return WAIT_FLOOR
        if ctx.floor_from is not None and self.perf - perf < ctx.floor_from[min(week, ctx.horizon - 1)] - 1e-6:
            return WAIT_FLOOR
        if ctx.job_perf > 0:
            gone: dict[str, float] = defaultdict(float)
            for r in racks:
                gone[r.block.node_type.generation] += r.perf
            pool = max(p - gone.get(g, 0.0) for g, p in self.perf_by_gen.items())
            if pool < ctx.job_perf - 1e-6:
                return WAIT_JOB
        return ""

    def headroom_below(self, gpus: int, perf: float, week: int) -> bool:
        """True when no rack of at least ``gpus``/``perf`` can leave without breaking a floor."""
        ctx = self.ctx
        if self.total() - gpus < ctx.floor_gpus:
            return True
        return ctx.floor_from is not None and self.perf - perf < ctx.floor_from[min(week, ctx.horizon - 1)] - 1e-6


def simulate(ctx: PlanContext, policy: str, progress: Callable[[float], None] | None = None) -> Run:
    """Replay ``policy`` week by week; every placement respects eligibility, space, power and cooling.

    ``progress`` is told the fraction of weeks replayed (0..1), about every 5 %."""
    H = ctx.horizon
    inputs = ctx.inputs
    target = inputs.target
    fac = ctx.facility
    S, P = ctx.space_release_weeks, ctx.power_release_weeks
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
    for hall_id, added in ctx.liquid_added.items():
        for week, kw in added:
            liquid.add_credit(hall_id, week, kw)
    cdu_cap = ctx.liquid_cap
    air_cap = ctx.air_cap
    order = {p.id: i for i, p in enumerate(inputs.positions)}
    occupied: set[str] = set()
    floors = FloorTracker(ctx)

    # The cooling a position gives a new rack: its own, or the upgrade's once that is what makes it eligible.
    cooling_of = {
        v.position_id: (
            positions[v.position_id].upgrade.cooling_after
            if v.status == "after_upgrade"
            else positions[v.position_id].cooling
        )  # type: ignore[union-attr]
        for v in ctx.verdicts
    }
    hall_cooling_kind: dict[str, str] = {}
    for pos in inputs.positions:
        if ctx.eligible_week[pos.id] is not None:
            hall_cooling_kind.setdefault(pos.hall_id, cooling_of[pos.id])

    def add_load(
        hall_id: str, spec: NodeTypeSpec, kw: float, start: int, sign: float = 1.0, cooling: str | None = None
    ) -> None:
        if start >= H:
            return
        lq, ar = heat_split(spec, kw, fac, cooling)
        power.step(hall_id, start, sign * kw)
        liquid.step(hall_id, start, sign * lq)
        air.step(hall_id, start, sign * ar)

    for rack in (*old, *kept):
        occupied.add(rack.position.id)
        add_load(rack.position.hall_id, rack.block.node_type, rack.power_kw, 0, cooling=rack.position.cooling)
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

    # What the undrained old racks of each hall could still free: [kW, liquid kW, air kW].
    freeable: dict[str, list[float]] = {h: [0.0, 0.0, 0.0] for h in ctx.halls}
    heat_of: dict[int, tuple[float, float, float]] = {}
    for r in old:
        lq, ar = heat_split(r.block.node_type, r.power_kw, fac, r.position.cooling)
        heat_of[id(r)] = (r.power_kw, lq, ar)
        f = freeable[r.position.hall_id]
        freeable[r.position.hall_id] = [f[0] + r.power_kw, f[1] + lq, f[2] + ar]

    def drain(rack: OldRack, week: int, reason: str, resource: str = "") -> None:
        rack.drain_week = week
        rack.drain_reason = reason
        rack.resource = resource
        if id(rack) in heat_of:
            f, freed = freeable[rack.position.hall_id], heat_of[id(rack)]
            freeable[rack.position.hall_id] = [a - b for a, b in zip(f, freed)]
        spec = rack.block.node_type
        add_load(rack.position.hall_id, spec, rack.power_kw, week + P, -1.0, rack.position.cooling)
        floors.add(spec.generation, -rack.gpus, -rack.perf)
        eligible = ctx.eligible_week[rack.position.id]
        if eligible is not None:
            free = max(eligible, week + S)
            if free < H:
                pending[free].append(((True, order[rack.position.id]), rack.position.id))

    def needs(rack: NewRack, cooling: str | None) -> tuple[float, float, float]:
        lq, ar = heat_split(target, rack.power_kw, fac, cooling)
        return rack.power_kw, lq, ar

    def rooms(hall_id: str, week: int) -> list[float]:
        """[power, liquid, air] headroom of ``hall_id`` from ``week`` to the end of the horizon."""
        cdu, room_air = cdu_cap[hall_id], air_cap[hall_id]
        return [
            ctx.usable_kw[hall_id] - power.peak_from(hall_id, week),
            INF if cdu is None else cdu - liquid.peak_from(hall_id, week),
            INF if room_air is None else room_air - air.peak_from(hall_id, week),
        ]

    def lacks(room: list[float], need: tuple[float, float, float]) -> str:
        if need[0] > room[0] + EPS:
            return WAIT_POWER
        if need[1] > 0 and need[1] > room[1] + EPS:
            return WAIT_CDU
        if need[2] > room[2] + EPS:
            return WAIT_AIR
        return ""

    def room(hall_id: str, week: int, rack: NewRack, cooling: str | None) -> str:
        """'' when the hall can carry ``rack`` (in a position of ``cooling``) from ``week`` on, else what it lacks."""
        return lacks(rooms(hall_id, week), needs(rack, cooling))

    used_by_hall: dict[str, list[OldRack]] = defaultdict(list)  # drained for a delivery, freed kW not yet used
    used_by_position: dict[str, OldRack] = {}

    def land(rack: NewRack, pos: Position, week: int) -> None:
        rack.position, rack.land_week = pos, week
        occupied.add(pos.id)
        add_load(pos.hall_id, target, rack.power_kw, week, cooling=cooling_of.get(pos.id))
        freed = used_by_position.pop(pos.id, None)
        if freed is not None and freed.used_week is None:
            freed.used_week = week
        for drained in used_by_hall.pop(pos.hall_id, ()):
            if drained.used_week is None and drained.drain_week is not None and drained.drain_week + P <= week:
                drained.used_week = week
            elif drained.used_week is None:
                used_by_hall[pos.hall_id].append(drained)
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
    # Old racks whose positions can take the target, earliest eligible first (position drains), and
    # every old rack hall by hall in drain order (power and cooling drains).
    position_queue = [r for r in drain_order if ctx.eligible_week[r.position.id] is not None]
    # For kW and cooling, racks in positions the target can never use go first, then those whose positions
    # it can use latest: a position is freed only when a delivery needs it.
    by_hall: dict[str, list[OldRack]] = defaultdict(list)
    for r in sorted(
        old,
        key=lambda r: (
            ctx.eligible_week[r.position.id] is not None,
            -(ctx.eligible_week[r.position.id] or 0),
            order[r.position.id],
        ),
    ):
        by_hall[r.position.hall_id].append(r)
    hall_next: dict[str, int] = defaultdict(int)
    swap_positions = position_queue
    swap_next = 0
    undrained_count = len(old)
    min_gpus = min((r.gpus for r in old), default=0)
    min_perf = min((r.perf for r in old), default=0.0)
    waiting: list[NewRack] = []
    due: dict[int, list[NewRack]] = defaultdict(list)
    last_due = -1
    for rack in new:
        if rack.due_week < H:
            due[rack.due_week].append(rack)
            last_due = max(last_due, rack.due_week)
        else:
            rack.wait_reason = WAIT_AFTER_HORIZON
    unlanded = sum(1 for r in new if r.due_week < H)
    last_service = 0
    eligible_untaken = 0  # eligible-by-now positions without a new rack (for wait reasons)
    eligible_from: dict[int, int] = defaultdict(int)
    for pos in inputs.positions:
        week = ctx.eligible_week[pos.id]
        if week is not None:
            eligible_from[min(week, H)] += 1
    floor_blocked = 0

    def hall_first(hall_id: str) -> int:
        """Index of the hall's first undrained old rack (kW and cooling order)."""
        lst = by_hall[hall_id]
        i = hall_next[hall_id]
        while i < len(lst) and lst[i].drain_week is not None:
            i += 1
        hall_next[hall_id] = i
        return i

    rank = {id(r): i for i, r in enumerate(drain_order)}
    position_by_hall: dict[str, list[OldRack]] = defaultdict(list)
    for r in position_queue:
        position_by_hall[r.position.hall_id].append(r)
    position_next_by_hall: dict[str, int] = defaultdict(int)

    def position_candidates(by_week: int) -> list[OldRack]:
        """Per hall, the first old rack (in drain order) whose position can take the target by ``by_week``."""
        out = []
        for hall_id, lst in position_by_hall.items():
            i = position_next_by_hall[hall_id]
            while i < len(lst) and lst[i].drain_week is not None:
                i += 1
            position_next_by_hall[hall_id] = i
            for r in lst[i:]:
                eligible = ctx.eligible_week[r.position.id]
                assert eligible is not None
                if eligible > by_week:
                    break
                if r.drain_week is None:
                    out.append(r)
                    break
        return sorted(out, key=lambda r: rank[id(r)])

    def power_drains(
        hall_id: str, room_h: list[float], need: tuple[float, float, float], w: int, exclude: OldRack | None = None
    ) -> tuple[list[OldRack], str]:
        """The fewest old racks of ``hall_id``, in drain order, whose freed kW and heat cover ``need``
        (and why not, when the hall's old racks cannot)."""
        short = [need[0] - room_h[0], need[1] - room_h[1] if need[1] > 0 else 0.0, need[2] - room_h[2]]
        if all(x <= EPS for x in short):
            return [], ""
        left = freeable[hall_id]
        if exclude is not None and id(exclude) in heat_of:
            left = [a - b for a, b in zip(left, heat_of[id(exclude)])]
        if any(s > a + EPS for s, a in zip(short, left)):
            # Even every old rack of the hall would not free enough: say what it lacks, without looking.
            return [], lacks([need[i] - short[i] + left[i] for i in range(3)], need) or WAIT_POWER
        chosen: list[OldRack] = []
        s0, s1, s2 = short
        lst = by_hall[hall_id]
        for i in range(hall_first(hall_id), len(lst)):
            r = lst[i]
            if r.drain_week is not None or r is exclude:
                continue
            f0, f1, f2 = heat_of[id(r)]
            if not ((s0 > EPS and f0 > 0) or (s1 > EPS and f1 > 0) or (s2 > EPS and f2 > 0)):
                continue
            chosen.append(r)
            s0, s1, s2 = s0 - f0, s1 - f1, s2 - f2
            if s0 <= EPS and s1 <= EPS and s2 <= EPS:
                return chosen, ""
        short = [s0, s1, s2]
        return [], lacks([need[i] - short[i] for i in range(3)], need) or WAIT_POWER

    def try_drains(racks: list[OldRack], w: int, reason: str, resource: str) -> str:
        """Drain ``racks`` in week ``w`` if all may go; '' or the floor's refusal (nothing drained then)."""
        nonlocal undrained_count
        why = floors.group_refusal(racks, w)
        if why:
            return why
        for r in racks:
            drain(r, w, reason, resource)
            undrained_count -= 1
        return ""

    def freed_by(racks: list[OldRack]) -> list[float]:
        """[kW, liquid kW, air kW] that draining ``racks`` frees."""
        total = [0.0, 0.0, 0.0]
        for r in racks:
            lq, ar = heat_split(r.block.node_type, r.power_kw, fac, r.position.cooling)
            total = [total[0] + r.power_kw, total[1] + lq, total[2] + ar]
        return total

    def jit_pass(w: int, lead: int, power_now: bool, positions_now: bool) -> bool:
        """Project the racks that could land at ``w + lead`` and drain now what they lack: kW and
        cooling (``power_now``) or a position (``positions_now``). False when a floor refused."""
        nonlocal floor_blocked
        t = w + lead
        if t >= H:
            return True
        queue = list(waiting)
        for k in range(w + 1, t + 1):
            queue.extend(due.get(k, ()))
        if not queue:
            return True
        free: dict[str, int] = {h: len(heap) for h, heap in heaps.items()}
        for k in range(w + 1, t + 1):
            for _, pid in pending.get(k, ()):
                free[positions[pid].hall_id] += 1
        room_at: dict[str, list[float]] = {}

        def room_of(h: str) -> list[float]:
            if h not in room_at:
                room_at[h] = rooms(h, t)
            return room_at[h]

        hall_rank = sorted(ctx.halls, key=lambda h: heaps[h][0][0] if heaps[h] else (True, 1 << 60))
        for rack in queue:
            need_in = {h: needs(rack, hall_cooling_kind.get(h)) for h in hall_rank}
            placed = next((h for h in hall_rank if free[h] > 0 and not lacks(room_of(h), need_in[h])), None)
            if placed is not None:  # lands without a drain
                free[placed] -= 1
                room_at[placed] = [a - b for a, b in zip(room_of(placed), need_in[placed])]
                continue
            short_hall = None
            for h in hall_rank:
                if free[h] <= 0:
                    continue
                chosen, _ = power_drains(h, room_of(h), need_in[h], w)
                if chosen:
                    short_hall = (h, chosen)
                    break
            if short_hall is not None:
                h, chosen = short_hall
                need = need_in[h]
                if power_now:
                    why = try_drains(
                        chosen, w, f"frees kW and cooling in {h} for {rack.id} landing {ctx.date_of(t)}", "power"
                    )
                    if why:
                        rack.wait_reason = why
                        floor_blocked += 1
                        return False
                    used_by_hall[h].extend(chosen)
                    room_at[h] = [a + f - n for a, f, n in zip(room_of(h), freed_by(chosen), need)]
                else:
                    # Its kW is drained later, just in time for it, if the floors allow it then as now: keep its
                    # position, and what it will draw, in the projection, so no other rack is promised them.
                    why = floors.group_refusal(chosen, w)
                    if why:
                        rack.wait_reason = why
                        floor_blocked += 1
                        return False
                    room_at[h] = [a - n for a, n in zip(room_of(h), need)]
                free[h] -= 1
                continue
            if not positions_now:
                break  # it needs a position: decided with the space-release lead
            chosen_group: tuple[OldRack, list[OldRack], list[float], tuple[float, float, float]] | None = None
            refused = ""
            for old_rack in position_candidates(t):
                h = old_rack.position.hall_id
                need = needs(rack, cooling_of.get(old_rack.position.id))
                after = [a + f for a, f in zip(room_of(h), freed_by([old_rack]))]
                extra, _ = power_drains(h, after, need, w, exclude=old_rack)
                if lacks(after, need) and not extra:
                    continue  # this hall cannot carry it even with the rack gone
                # The position and the kW it still lacks go together: a position freed for a rack whose power
                # the floor would not free later would stand empty.
                why = floors.group_refusal([old_rack, *extra], w)
                if why:
                    refused = refused or why
                    continue
                chosen_group = (old_rack, extra, after, need)
                break
            if chosen_group is None:
                if refused:
                    rack.wait_reason = refused
                    floor_blocked += 1
                    return False
                break  # no old rack holds a position that can take it by then: nothing to drain for it
            old_rack, extra, after, need = chosen_group
            h = old_rack.position.hall_id
            try_drains(
                [old_rack],
                w,
                f"frees position {old_rack.position.rack} for {rack.id} landing {ctx.date_of(t)}",
                "position",
            )
            used_by_position[old_rack.position.id] = old_rack
            if extra:
                try_drains(extra, w, f"frees kW and cooling in {h} for {rack.id} landing {ctx.date_of(t)}", "power")
                used_by_hall[h].extend(extra)
                after = [a + f for a, f in zip(after, freed_by(extra))]
                # Their positions are free by then too, where the target can use them.
                free[h] += sum(1 for r in extra if (ctx.eligible_week[r.position.id] or t + 1) <= t)
            room_at[h] = [a - n for a, n in zip(after, need)]
        return True

    def jit_drains(w: int) -> None:
        """Drain now what a delivery landing at ``w + P`` (kW, cooling) or ``w + S`` (a position) needs."""
        if undrained_count == 0:
            return
        if P >= S:
            jit_pass(w, S, True, True)
        elif jit_pass(w, P, True, False):
            jit_pass(w, S, False, True)

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
                drain(rack, 0, "naive: decommission first")
            undrained_count = 0
        arrivals = due.pop(w, [])
        if policy == ONE_FOR_ONE_SWAP:
            for rack in arrivals:
                if swap_next < len(swap_positions):
                    rack.swap = swap_positions[swap_next]
                    swap_next += 1
                    drain(rack.swap, w, "naive: one-for-one swap")
        for item in pending.pop(w, ()):
            heapq.heappush(heaps[positions[item[1]].hall_id], item)
        waiting.extend(arrivals)
        if policy == ONE_FOR_ONE_SWAP:
            still = []
            for rack in waiting:
                if rack.swap is None:
                    rack.wait_reason = WAIT_NO_SWAP
                    still.append(rack)
                    continue
                pos = rack.swap.position
                eligible = ctx.eligible_week[pos.id]
                drained = rack.swap.drain_week or 0
                if eligible is None or max(eligible, drained + S) > w:
                    rack.wait_reason = WAIT_SWAP
                    still.append(rack)
                    continue
                reason = room(pos.hall_id, w, rack, cooling_of.get(pos.id))
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
                # The free position first in order (never used, then inventory order) in a hall with room.
                for heap in sorted((heap for heap in heaps.values() if heap), key=lambda heap: heap[0]):
                    reason = room(positions[heap[0][1]].hall_id, w, rack, cooling_of.get(heap[0][1]))
                    if reason:
                        reasons.append(reason)
                    else:
                        best = heap[0]
                        break
                if best is None:
                    if reasons:
                        why = reasons[0]
                    elif eligible_untaken <= 0:
                        why = WAIT_FACILITY
                    else:
                        why = WAIT_HELD
                    for later in waiting[landed:]:
                        later.wait_reason = why
                    break
                pos = positions[best[1]]
                heapq.heappop(heaps[pos.hall_id])
                land(rack, pos, w)
                last_service = max(last_service, w + ctx.service_weeks)
                unlanded -= 1
                eligible_untaken -= 1
                landed += 1
            waiting = waiting[landed:]
        if policy == PLAN and undrained_count:
            jit_drains(w)
            if (
                unlanded == 0
                and w >= last_due
                and w >= last_service
                and not floors.headroom_below(min_gpus, min_perf, w)
            ):
                for rack in drain_order:
                    if rack.drain_week is not None:
                        continue
                    if floors.headroom_below(min_gpus, min_perf, w):
                        break
                    if not floors.refusal(rack, w):
                        drain(rack, w, RETIRED)
                        rack.used_week = w
                        undrained_count -= 1
        for rack in waiting:
            if rack.wait_reason:
                rack.waits[rack.wait_reason] = rack.waits.get(rack.wait_reason, 0) + 1
    return Run(old, new, kept, power.levels(), liquid.levels(), air.levels(), floor_blocked)


def _steps(H: int) -> list[float]:
    return [0.0] * (H + 1)


def build_timeline(ctx: PlanContext, run: Run) -> Timeline:
    inputs = ctx.inputs
    target = inputs.target
    H = ctx.horizon
    S = ctx.space_release_weeks
    budgets = {h.id: h.it_power_budget_kw for h in inputs.halls}
    generations = sorted({b.node_type.generation for b in (*inputs.fleet, *inputs.kept)} | {target.generation})
    gpus_d = {g: [0] * (H + 1) for g in generations}
    perf_d = {g: _steps(H) for g in generations}
    cabled_d = [0] * (H + 1)
    drained_d = _steps(H)

    def span(gen: str, gpus: int, perf: float, start: int, end: int) -> None:
        start, end = max(0, min(H, start)), max(0, min(H, end))
        if start < end:
            gpus_d[gen][start] += gpus
            gpus_d[gen][end] -= gpus
            perf_d[gen][start] += perf
            perf_d[gen][end] -= perf

    def cabled(gpus: int, start: int, end: int) -> None:
        start, end = max(0, min(H, start)), max(0, min(H, end))
        if start < end:
            cabled_d[start] += gpus
            cabled_d[end] -= gpus

    for rack in run.old:
        end = H if rack.drain_week is None else rack.drain_week
        span(rack.block.node_type.generation, rack.gpus, rack.perf, 0, end)
        # Cabled until shipped: draining and sanitising nodes keep their fabric ports.
        cabled(rack.gpus, 0, H if rack.drain_week is None else rack.drain_week + S)
        if rack.drain_week is not None and rack.drain_week < H:
            drained_d[max(0, rack.drain_week)] += rack.perf
    for rack in run.kept:
        span(rack.block.node_type.generation, rack.gpus, rack.perf, 0, H)
        cabled(rack.gpus, 0, H)
    for rack in run.new:
        if rack.land_week is not None:
            g = rack.nodes * target.gpus_per_node
            span(target.generation, g, g * target.perf_per_gpu, rack.land_week + ctx.service_weeks, H)
            cabled(g, rack.land_week, H)  # cabled from landing: burn-in runs on the fabric
    points = []
    gpus = dict.fromkeys(generations, 0)
    perf = dict.fromkeys(generations, 0.0)
    cabled_now = 0
    drained_now = 0.0
    for t in range(H):
        for g in generations:
            gpus[g] += gpus_d[g][t]
            perf[g] += perf_d[g][t]
        cabled_now += cabled_d[t]
        drained_now += drained_d[t]
        kw = {h: run.power[h][t] for h in budgets}
        facility = sum(
            (run.power[h][t] - run.liquid[h][t]) * ctx.pue[h] + run.liquid[h][t] * ctx.liquid_pue[h] for h in budgets
        )
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
                facility_power_kw=round(facility, 6),
                largest_pool_perf=round(max(perf.values()), 6),
                cabled_gpus=cabled_now,
                floor_perf=ctx.floor_at(t),
                drained_perf=round(drained_now, 6),
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
    for drain in drain_items(ctx, run):
        item = (drain.position_id, drain.nodes, drain.gpus)
        note = f"block {drain.block}: {drain.reason}"
        groups[("drain", drain.start, drain.drained, note)].append(item)
        groups[
            ("sanitise", drain.drained, drain.sanitised, "NIST SP 800-88 record per drive; still draws power")
        ].append(item)
        groups[("ship", drain.sanitised, drain.shipped, "frees the position")].append(item)
    rank = {k: i for i, k in enumerate(("facility_prep", "land", "burn_in", "cut_over", "drain", "sanitise", "ship"))}
    phases = [
        Phase(kind, start, end, tuple(i[0] for i in items), sum(i[1] for i in items), sum(i[2] for i in items), note)  # type: ignore[arg-type]
        for (kind, start, end, note), items in groups.items()
    ]
    return tuple(sorted(phases, key=lambda p: (p.start, rank[p.kind], p.end, p.notes)))


def drain_items(ctx: PlanContext, run: Run) -> tuple[DrainItem, ...]:
    """The drain schedule rack by rack (position), in drain order: what a disposition reads."""
    inputs = ctx.inputs
    items = []
    for rack in sorted(
        (r for r in run.old if r.drain_week is not None), key=lambda r: (r.drain_week, r.position.hall_id, r.id)
    ):
        assert rack.drain_week is not None
        start = ctx.date_of(rack.drain_week)
        drained = start + timedelta(days=inputs.drain_days)
        sanitised = drained + timedelta(days=inputs.sanitise_days)
        shipped = sanitised + timedelta(days=inputs.ship_days)
        items.append(
            DrainItem(
                position_id=rack.position.id,
                rack=rack.position.rack,
                hall_id=rack.position.hall_id,
                block=rack.block.id,
                node_type=rack.block.node_type.name,
                nodes=rack.nodes,
                gpus=rack.gpus,
                kw=round(rack.power_kw, 6),
                start=start,
                drained=drained,
                sanitised=sanitised,
                shipped=shipped,
                reason=rack.drain_reason,
                frees=rack.resource or "retirement",
                used=ctx.date_of(rack.used_week) if rack.used_week is not None else None,
            )
        )
    return tuple(items)
