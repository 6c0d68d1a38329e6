"""Simulated faults follow reliability.csv; scenarios parse; durations come from the reference."""

from __future__ import annotations

import math
from collections import Counter
from datetime import UTC
from random import Random

import pytest

from hangar_agent.hardware.faults import FaultProcess, ScriptedFault, parse_scenario
from hangar_agent.hardware.reference import load_reliability

# The published Llama 3 table (reliability.csv), % of the 419 unexpected interruptions.
PUBLISHED = {
    "gpu": 30.1,
    "hbm3": 17.2,
    "software": 12.9,
    "network_switch_cable": 8.4,
    "host_maintenance": 7.6,
    "sram": 4.5,
    "gpu_system_processor": 4.1,
    "nic": 1.7,
    "silent_data_corruption": 1.4,
    "gpu_thermal": 1.4,
}
LLAMA3_GPUS, LLAMA3_DAYS, LLAMA3_UNEXPECTED = 16_384, 54, 419


def test_reference_is_read_from_csv_without_renormalising() -> None:
    ref = load_reliability()
    assert ref.rate_per_node_day == 0.0038 and ref.rate_per_gpu_day == pytest.approx(0.0038 / 8)
    expected = {k: v / 100 for k, v in PUBLISHED.items()}
    expected["other"] = 1 - sum(expected.values())  # what the table leaves unnamed
    assert ref.cause_mix == pytest.approx(expected)
    assert ref.cause_mix["gpu"] == pytest.approx(0.301)  # as published, not 30.1/87.9
    gpu_share = sum(
        ref.cause_mix[c]
        for c in ("gpu", "hbm3", "sram", "gpu_system_processor", "silent_data_corruption", "gpu_thermal")
    )
    assert gpu_share == pytest.approx(0.587)  # the paper's "GPU issues: 58.7%"
    assert ref.dcgm_seconds == {"dcgm_r1": 30.0, "dcgm_r2": 120.0, "dcgm_r3": 900.0}


def _simulate(ref, rng, gpus_per_node: int, nodes: int, days: float) -> Counter:
    horizon = days * 86400.0
    causes: Counter[str] = Counter()
    for _ in range(nodes):
        process = FaultProcess(rng, ref, gpus_per_node)
        t = process.next_gap_seconds()
        while t < horizon:
            causes[process.cause()] += 1
            t += process.next_gap_seconds()
    return causes


def test_a_simulated_year_matches_the_published_table() -> None:
    """The Llama 3 cluster (16,384 GPUs as 2,048 8-GPU nodes) for a year. Tolerances: the total
    within 4 Poisson standard deviations of the published rate, each cause's share within 4
    binomial standard deviations of its published share (about 1 in 16,000 to fail by chance)."""
    ref = load_reliability()
    causes = _simulate(ref, Random(2026), 8, LLAMA3_GPUS // 8, 365)
    n = sum(causes.values())
    expected = LLAMA3_UNEXPECTED / LLAMA3_DAYS * 365  # ≈ 2,832 a year at the published rate
    assert abs(n - expected) < 4 * math.sqrt(expected)
    for cause, share in ref.cause_mix.items():
        sigma = math.sqrt(share * (1 - share) / n)
        assert abs(causes[cause] / n - share) < 4 * sigma + 1e-9, (cause, causes[cause] / n, share)
    assert causes["gpu_thermal"] > 0 and causes["other"] > 0


def test_the_rate_is_per_gpu_not_per_node() -> None:
    """The same 16,384 GPUs as 4-GPU GB200 trays fail as often in total as in 8-GPU nodes."""
    ref = load_reliability()
    trays = sum(_simulate(ref, Random(7), 4, LLAMA3_GPUS // 4, 365).values())
    expected = ref.rate_per_gpu_day * LLAMA3_GPUS * 365
    assert abs(trays - expected) < 4 * math.sqrt(expected)


def test_a_failed_nic_survives_a_reboot_until_the_part_is_replaced() -> None:
    from datetime import UTC, datetime, timedelta

    from hangar_agent.hardware.simulated import SimulatedHardware

    start = datetime(2026, 1, 1, tzinfo=UTC)
    hw = SimulatedHardware(rng=Random(1), start=start, random_faults=False)
    hw.inject_cause("nic")
    hw.reboot(timedelta(minutes=5))
    hw.advance(start + timedelta(minutes=10), allocated=False)
    assert {c["name"]: c["status"] for c in hw.health_checks()}["ib_link"] == "fail"
    assert hw.ib_ports()[0]["state"] == "1: DOWN"
    hw.replace_parts()
    assert {c["name"]: c["status"] for c in hw.health_checks()}["ib_link"] == "pass"


def test_hbm_faults_become_xid_48_with_a_pending_remap_never_an_invented_xid_64() -> None:
    from datetime import UTC, datetime

    from hangar_agent.hardware.simulated import SimulatedHardware

    hw = SimulatedHardware(rng=Random(3), start=datetime(2026, 1, 1, tzinfo=UTC), random_faults=False)
    for _ in range(200):
        hw.inject_cause("hbm3", gpu=0)
    state = hw.gpu_state[0]
    assert state.row_remap_pending and not state.row_remap_failed and 64 not in state.xids


def test_thermal_faults_show_as_throttle_reasons() -> None:
    from datetime import UTC, datetime

    from hangar_agent.hardware.simulated import SimulatedHardware

    hw = SimulatedHardware(rng=Random(3), start=datetime(2026, 1, 1, tzinfo=UTC), random_faults=False)
    hw.inject_cause("gpu_thermal", gpu=2)
    gpus = {g["index"]: g for g in hw.gpus()}
    assert gpus[2]["throttle_reasons"] & 0x40 and gpus[2]["temperature_c"] >= 90 and not gpus[1]["throttle_reasons"]


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
        ScriptedFault(at=30, fault="xid", xid=79, gpu=3, node="host-001")
    ]
    with pytest.raises(ValueError):
        parse_scenario("melt gpu 3 at 30s")


# ---- the simulated node's wall power and energy counters -------------------------------------


def _node(tmp_path=None, start=None, **kw):
    from datetime import datetime

    from hangar_agent.hardware.simulated import SimulatedHardware

    start = start or datetime(2026, 11, 2, tzinfo=UTC)
    return SimulatedHardware(
        rng=Random(7),
        start=start,
        random_faults=False,
        counter_file=(tmp_path / "counters.json") if tmp_path else None,
        **kw,
    ), start


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
