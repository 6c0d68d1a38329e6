"""Simulated faults follow reliability.csv; scenarios parse; durations come from the reference."""

from __future__ import annotations

from collections import Counter
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
