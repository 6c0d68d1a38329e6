"""Metering intervals and the spool's exactly-once, in-order replay across outages and restarts."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from random import Random

from agent_fakes import T0, FakeControlPlane

from hangar_agent.agent import Agent
from hangar_agent.config import AgentConfig
from hangar_agent.hardware.simulated import SimulatedHardware
from hangar_agent.metering import Meter, Usage, parse_rfc3339
from hangar_agent.spool import Spool

USAGE = Usage(allocation_id="alc_1", tenant_id="ten_1", sku="h100-sxm-8x", gpus=8)


def test_intervals_are_contiguous_and_split_on_change() -> None:
    meter = Meter(Spool(":memory:"), interval=60)
    events = []
    for second in range(0, 200, 10):
        events += meter.observe(T0 + timedelta(seconds=second), USAGE)
    other = Usage("alc_2", "ten_1", "h100-sxm-8x", 8)
    events += meter.observe(T0 + timedelta(seconds=200), other)
    events += meter.observe(T0 + timedelta(seconds=230), None)
    assert [(e["start"], e["end"], e["quantity"], e["allocation_id"]) for e in events] == [
        ("2026-11-29T20:00:00Z", "2026-11-29T20:01:00Z", "480", "alc_1"),
        ("2026-11-29T20:01:00Z", "2026-11-29T20:02:00Z", "480", "alc_1"),
        ("2026-11-29T20:02:00Z", "2026-11-29T20:03:00Z", "480", "alc_1"),
        ("2026-11-29T20:03:00Z", "2026-11-29T20:03:20Z", "160", "alc_1"),
        ("2026-11-29T20:03:20Z", "2026-11-29T20:03:50Z", "240", "alc_2"),
    ]
    assert all(e["unit"] == "gpu_second" and len(e["event_id"]) == 36 for e in events)
    total = sum(Decimal(e["quantity"]) for e in events)
    assert total == 8 * 230


def test_unobserved_time_is_not_billed() -> None:
    meter = Meter(Spool(":memory:"), interval=60)
    meter.observe(T0, USAGE)
    meter.observe(T0 + timedelta(seconds=30), USAGE)
    events = meter.observe(T0 + timedelta(hours=2), USAGE)
    assert [(e["start"], e["end"]) for e in events] == [("2026-11-29T20:00:00Z", "2026-11-29T20:00:30Z")]


def _agent(spool: Spool, cp: FakeControlPlane) -> Agent:
    hardware = SimulatedHardware(rng=Random(1), start=T0, random_faults=False)
    config = AgentConfig(
        url="http://cp",
        token="t",
        backend="simulated",
        meter_interval=60,
        sku="h100-sxm-8x",
        backoff_base=1,
        backoff_cap=30,
    )
    return Agent(config=config, transport=cp, hardware=hardware, executors={}, spool=spool, rng=Random(2))


def test_outage_and_restart_replay_exactly_once_in_order(tmp_path) -> None:
    path = tmp_path / "spool.sqlite3"
    cp = FakeControlPlane()
    cp.desired = {"lifecycle": "active", "allocation_id": "alc_1", "tenant_id": "ten_1", "actions": []}
    agent = _agent(Spool(path), cp)
    created: list[str] = []
    now = T0
    for step in range(0, 3600, 5):
        now = T0 + timedelta(seconds=step)
        cp.down = 600 <= step < 2400
        before = agent.spool.pending("meter")
        agent.tick(now)
        created += [m.payload["event_id"] for m in agent.spool.peek_batch(1000, "meter")[before:]]
        if step == 1800:  # the process dies mid-outage; a new one opens the same spool
            agent.spool.close()
            agent = _agent(Spool(path), cp)
    assert len(cp.received_ids) == len(set(cp.received_ids))
    events = [cp.ledger[i] for i in cp.received_ids]
    starts = [parse_rfc3339(e["start"]) for e in events]
    assert starts == sorted(starts)
    assert all(a["end"] == b["start"] for a, b in zip(events, events[1:]))
    assert len(events) >= 58 and agent.spool.pending("meter") == 0


def test_refused_event_is_parked_and_does_not_block(tmp_path) -> None:
    cp = FakeControlPlane()
    cp.desired = {"lifecycle": "active", "allocation_id": "alc_1", "tenant_id": "ten_1", "actions": []}
    agent = _agent(Spool(tmp_path / "s.db"), cp)
    agent.tick(T0)
    cp.down = True
    for step in range(10, 600, 10):
        agent.tick(T0 + timedelta(seconds=step))
    queued = [m.payload["event_id"] for m in agent.spool.peek_batch(1000, "meter")]
    cp.reject_ids = {queued[3]}
    cp.down = False
    agent.tick(T0 + timedelta(seconds=900))
    assert cp.received_ids[: len(queued) - 1] == [i for i in queued if i != queued[3]]
    [(parked, reason)] = agent.spool.dead_letters()
    assert parked.payload["event_id"] == queued[3] and "422" in reason
