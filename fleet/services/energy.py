"""Energy from cumulative counters: an agent outage loses nothing, a reset or a bad reading
never makes energy up.

The agent reports counters that only grow: NVML's total energy per GPU (mJ since the driver
loaded) and, where the node has one, the meter's energy counter (J; the agent integrates the
meter's power itself when the BMC keeps no counter, and persists it across restarts). Energy
over any gap, a 10 s heartbeat or a 3-hour outage, is the counter delta, spread evenly over
the gap's UTC hours (nothing says how it was distributed inside the gap).

- A counter lower than its baseline went backwards (driver reload, BMC reset): a detected
  reset, counted and logged. Counters restart at zero, so the new value is the energy since
  the reset; what was used between the last reading and the reset is unknown and not credited.
- A delta whose average power is above the node type's rated maximum is impossible: refused,
  counted and logged, credits nothing, and the new values become the baseline.
- Without a meter counter the node's energy is estimated: GPU counter deltas + the type's host
  share × elapsed time (fleet.wall_power), recorded under source `estimate`.
"""

import logging
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.db import IntegrityError, transaction
from django.db.models import F

from fleet.choices import EnergySource
from fleet.models import NodeEnergyCounter, NodeEnergyHour, NodeEnergyMonth
from fleet.wall_power import spread_over_hours

log = logging.getLogger(__name__)

# Counters are integrated at most this often: a heartbeat every 10 s need not write each time,
# and nothing is lost by waiting because the next delta covers the whole span.
INTEGRATE_EVERY = timedelta(seconds=60)
MAX_COUNTER = 2**62  # bounds what a client can make the database hold


def _delta(old, new) -> tuple[int, bool]:
    """(energy since the baseline, whether the counter went backwards)."""
    if new < old:
        return new, True
    return new - old, False


def record_counters(
    *,
    node_id,
    now: datetime,
    node_kw: Decimal,
    host_kw: Decimal | None,
    wall_energy_j: int | None,
    wall_source: str,
    gpu_energy_mj: dict[int, int],
) -> str:
    """Take one heartbeat's counters. Returns what happened: `baseline`, `recorded`, `too_soon`,
    `refused` or `nothing` (no usable counter)."""
    with transaction.atomic():
        state = NodeEnergyCounter.objects.select_for_update().filter(node_id=node_id).first()
        if state is None:
            try:
                with transaction.atomic():
                    NodeEnergyCounter.objects.create(
                        node_id=node_id,
                        read_at=now,
                        wall_energy_j=wall_energy_j,
                        wall_source=wall_source if wall_energy_j is not None else "",
                        gpu_energy_mj={str(k): v for k, v in gpu_energy_mj.items()},
                    )
            except IntegrityError:
                pass  # a concurrent heartbeat set the baseline
            return "baseline"
        elapsed = (now - state.read_at).total_seconds()
        if elapsed < INTEGRATE_EVERY.total_seconds():
            return "too_soon"
        reset = False
        gpu_j = None
        old_gpus = state.gpu_energy_mj or {}
        common = [i for i in gpu_energy_mj if str(i) in old_gpus]
        if common:
            total_mj = 0
            for index in common:
                delta, went_back = _delta(old_gpus[str(index)], gpu_energy_mj[index])
                total_mj += delta
                reset |= went_back
            gpu_j = total_mj // 1000
        if wall_energy_j is not None and state.wall_energy_j is not None and state.wall_source == wall_source:
            it_j, went_back = _delta(state.wall_energy_j, wall_energy_j)
            reset |= went_back
            source = wall_source
        elif gpu_j is not None and host_kw is not None:
            it_j = gpu_j + int(host_kw * 1000 * Decimal(str(elapsed)))
            source = EnergySource.ESTIMATE
        else:
            it_j, source = None, None

        state.read_at = now
        state.wall_energy_j = wall_energy_j
        state.wall_source = wall_source if wall_energy_j is not None else ""
        state.gpu_energy_mj = {str(k): v for k, v in gpu_energy_mj.items()}
        if reset:
            state.resets += 1
            state.last_reset_at = now
            log.warning(
                "energy counter reset detected on node %s (counter went backwards); crediting the energy "
                "since the reset only",
                node_id,
            )
        limit_j = float(node_kw) * 1000 * elapsed
        if it_j is not None and it_j > limit_j:
            state.refused += 1
            state.last_refused_at = now
            state.last_refused_detail = (
                f"{it_j} J in {elapsed:.0f} s is {it_j / elapsed / 1000:.1f} kW, above the "
                f"{node_kw} kW the node type can draw"
            )[:200]
            log.warning("energy reading refused on node %s: %s", node_id, state.last_refused_detail)
            state.save()
            return "refused"
        state.save()
        if it_j is None:
            return "nothing"
        start = now - timedelta(seconds=elapsed)
        gpu_parts = dict((hour, j) for hour, j, _ in spread_over_hours(start, now, gpu_j or 0))
        _add(
            node_id,
            source,
            [
                (hour, joules, gpu_parts.get(hour, 0), seconds)
                for hour, joules, seconds in spread_over_hours(start, now, it_j)
            ],
        )
        return "recorded"


def _add(node_id, source: str, parts: list[tuple[datetime, int, int, int]]) -> None:
    """Add (hour, IT J, GPU J, seconds) parts to the node's hour rows and, in the same
    transaction, to its month roll-up rows (one statement per month touched, however long the
    gap). The caller holds the node's counter row locked, so no other writer races these rows."""
    months: dict = {}
    for hour, it_j, gpu_j, seconds in parts:
        _bump(NodeEnergyHour, {"node_id": node_id, "hour": hour, "source": source}, it_j, gpu_j, seconds)
        month = hour.astimezone(UTC).date().replace(day=1)
        m = months.setdefault(month, [0, 0, 0])
        m[0], m[1], m[2] = m[0] + it_j, m[1] + gpu_j, m[2] + seconds
    for month, (it_j, gpu_j, seconds) in months.items():
        _bump(NodeEnergyMonth, {"node_id": node_id, "month": month, "source": source}, it_j, gpu_j, seconds)


def _bump(model, key: dict, it_j: int, gpu_j: int, seconds: int) -> None:
    sums = {
        "it_energy_j": F("it_energy_j") + it_j,
        "gpu_energy_j": F("gpu_energy_j") + gpu_j,
        "seconds": F("seconds") + seconds,
    }
    if not model.objects.filter(**key).update(**sums):
        model.objects.create(**key, it_energy_j=it_j, gpu_energy_j=gpu_j, seconds=seconds)
