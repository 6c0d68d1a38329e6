"""Simulated faults follow reliability.csv; scenarios parse; durations come from the reference."""

from __future__ import annotations

from collections import Counter
from datetime import UTC
from random import Random

import pytest

from hangar_agent.hardware.simulated import (
    FaultProcess,
    ScriptedFault,
    load_reliability,
    parse_scenario,
)

REFERENCE_MIX = {"gpu": 30.1, "hbm3": 17.2, "software": 12.9, "network_switch_cable": 8.4,
                 "host_maintenance": 7.6, "sram": 4.5, "gpu_system_processor": 4.1, "nic": 1.7,
                 "silent_data_corruption": 1.4}


def test_reference_is_read_from_csv() -> None:
    ref = load_reliability()
    assert ref.rate_per_node_day == 0.0038
    total = sum(REFERENCE_MIX.values())
    assert ref.cause_mix == pytest.approx({k: v / total for k, v in REFERENCE_MIX.items()})
    assert ref.dcgm_seconds == {"dcgm_r1": 30.0, "dcgm_r2": 120.0, "dcgm_r3": 900.0}


def test_fleet_year_matches_rate_and_cause_mix() -> None:
    ref = load_reliability()
    rng = Random(2026)
    nodes, days = 2000, 365
    horizon = days * 86400.0
    causes: Counter[str] = Counter()
    for _ in range(nodes):
        process = FaultProcess(rng, ref)
        t = process.next_gap_seconds()
        while t < horizon:
            causes[process.cause()] += 1
            t += process.next_gap_seconds()
    n = sum(causes.values())
    assert n / (nodes * days) == pytest.approx(0.0038, rel=0.10)
    for cause, share in ref.cause_mix.items():
        assert abs(causes[cause] / n - share) < 0.02, cause


def test_scenario_dsl_and_list_forms() -> None:
    faults = parse_scenario("""
        xid 79 on gpu 3 at 30s
        ib_link fail at 2m   # a cable
        heartbeat_loss for 10m at 1h; cause hbm3 on gpu 1 on host-002 at 5
    """)
    assert faults == [
        ScriptedFault(at=5, fault="cause", cause="hbm3", gpu=1, node="host-002"),
        ScriptedFault(at=30, fault="xid", xid=79, gpu=3),
        ScriptedFault(at=120, fault="ib_link"),
        ScriptedFault(at=3600, fault="heartbeat_loss", duration=600),
    ]
    assert parse_scenario([{"at": 30, "node": "host-001", "fault": "xid", "xid": 79, "gpu": 3}]) == [
        ScriptedFault(at=30, fault="xid", xid=79, gpu=3, node="host-001")]
    with pytest.raises(ValueError):
        parse_scenario("melt gpu 3 at 30s")


# ---- the simulated node's wall power and energy counters -------------------------------------

def _node(tmp_path=None, start=None, **kw):
    from datetime import datetime

    from hangar_agent.hardware.simulated import SimulatedHardware

    start = start or datetime(2026, 11, 2, tzinfo=UTC)
    return SimulatedHardware(rng=Random(7), start=start, random_faults=False,
                             counter_file=(tmp_path / "counters.json") if tmp_path else None, **kw), start


def test_a_256_node_h100_hall_reads_between_0_8_and_2_6_mw_for_its_load() -> None:
    from datetime import timedelta

    idle, start = _node()
    idle.advance(start + timedelta(seconds=10), allocated=False)
    busy, _ = _node()
    busy.advance(start + timedelta(seconds=10), allocated=True)
    idle_mw, busy_mw = 256 * idle.wall_w() / 1e6, 256 * busy.wall_w() / 1e6
    assert 0.78 <= idle_mw < 0.9  # GPUs at 70-90 W, host and fans idling
    assert 2.3 < busy_mw <= 2.6  # GPUs at 600-700 W, host at its facility.csv share (4.6 kW)
    assert busy.wall_w() <= 10_200  # never above the DGX H100's rated 10.2 kW
    gpu_w = sum(g["power_w"] for g in busy.gpus())
    assert busy.wall_power()["watts"] > gpu_w + 4000  # wall power is not GPU power


def test_energy_counters_grow_with_the_draw_and_survive_an_agent_restart(tmp_path) -> None:
    from datetime import timedelta

    node, start = _node(tmp_path)
    idle_w = node.wall_w()
    node.advance(start + timedelta(hours=1), allocated=True)  # the hour before was idle
    first = node.wall_power()
    assert first["energy_j"] == pytest.approx(idle_w * 3600, rel=1e-6)
    node.advance(start + timedelta(hours=2), allocated=True)
    busy_hour = node.wall_power()["energy_j"] - first["energy_j"]
    assert busy_hour == pytest.approx(node.wall_w() * 3600, rel=1e-6)
    gpu_mj = [g["energy_mj"] for g in node.gpus()]
    # the agent restarts: a new process, the same BMC and driver counters
    again, _ = _node(tmp_path, start=start + timedelta(hours=2))
    assert again.wall_power()["energy_j"] == first["energy_j"] + busy_hour
    again.advance(start + timedelta(hours=3), allocated=True)
    assert [g["energy_mj"] for g in again.gpus()] > gpu_mj
    assert again.wall_power()["energy_j"] > first["energy_j"] + busy_hour
