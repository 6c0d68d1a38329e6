"""The agent's tick: heartbeats, once-only actions in order, health reports, metering gates."""

from __future__ import annotations

from datetime import timedelta
from random import Random

from agent_fakes import T0, FakeControlPlane

from hangar_agent.agent import Agent
from hangar_agent.config import AgentConfig
from hangar_agent.executors import simulated_executors
from hangar_agent.hardware.simulated import SimulatedHardware
from hangar_agent.spool import Spool


def make_agent(cp: FakeControlPlane, spool: Spool | None = None, scenario: str | None = None) -> Agent:
    hardware = SimulatedHardware(rng=Random(7), start=T0, random_faults=False, scenario=scenario, speed=10.0)
    config = AgentConfig(url="http://cp", token="t", backend="simulated", sku="h100-sxm-8x")
    return Agent(
        config=config,
        transport=cp,
        hardware=hardware,
        executors=simulated_executors(hardware, Random(8)),
        spool=spool or Spool(":memory:"),
        rng=Random(9),
    )


def run(agent: Agent, seconds: int, start: int = 0) -> None:
    for step in range(start, start + seconds):
        agent.tick(T0 + timedelta(seconds=step))


def test_stop_then_wipe_run_once_each_in_order() -> None:
    cp = FakeControlPlane()
    cp.desired = {
        "lifecycle": "releasing",
        "allocation_id": "alc_1",
        "tenant_id": "ten_1",
        "actions": [
            {"id": "act_stop", "action": "stop", "params": {"allocation_id": "alc_1"}},
            {"id": "act_wipe", "action": "wipe", "params": {}},
        ],
    }
    agent = make_agent(cp)
    run(agent, 120)
    assert [(r["action_id"], r["action"], r["status"]) for r in cp.action_results] == [
        ("act_stop", "stop", "succeeded"),
        ("act_wipe", "wipe", "succeeded"),
    ]
    assert all(
        set(r) == {"action_id", "action", "status", "detail", "output", "finished_at"} for r in cp.action_results
    )
    assert cp.action_results[0]["finished_at"] <= cp.action_results[1]["finished_at"]
    run(agent, 60, start=120)  # desired-state still lists both: nothing re-runs
    assert len(cp.action_results) == 2
    restarted = make_agent(cp, spool=agent.spool)
    run(restarted, 60, start=180)
    assert len(cp.action_results) == 2


def test_heartbeat_shape_and_xid_reported_once() -> None:
    cp = FakeControlPlane()
    agent = make_agent(cp, scenario="xid 13 on gpu 3 at 50s")
    run(agent, 30)
    hb = cp.heartbeats[-1]
    assert set(hb) == {
        "observed_at",
        "power_state",
        "agent_version",
        "gpus",
        "ib_ports",
        "wall_power",
        "driver_version",
        "gpu_architecture",
    }
    assert hb["gpu_architecture"] == "hopper" and hb["driver_version"].count(".") == 2
    assert hb["wall_power"]["source"] == "bmc" and hb["wall_power"]["energy_j"] >= 0
    assert hb["observed_at"].endswith("Z") and len(hb["gpus"]) == 8
    xids = [(i, g["index"], g["xid_errors"]) for i, h in enumerate(cp.heartbeats) for g in h["gpus"] if g["xid_errors"]]
    assert len(xids) == 1 and xids[0][1:] == (3, [13])
    events = [g["xid_events"] for h in cp.heartbeats for g in h["gpus"] if g["xid_events"]]
    assert events == [[{"xid": 13}]]


def test_an_xid_that_changes_the_recovery_action_comes_with_xid_154_and_its_action() -> None:
    cp = FakeControlPlane()
    agent = make_agent(cp, scenario="xid 94 on gpu 2 at 20s; xid 62 on gpu 5 at 20s")
    run(agent, 30)
    events = {g["index"]: g["xid_events"] for h in cp.heartbeats for g in h["gpus"] if g["xid_events"]}
    assert events == {
        2: [{"xid": 94}, {"xid": 154, "recovery_action": 0}],
        5: [{"xid": 62}, {"xid": 154, "recovery_action": 1}],
    }


def test_dcgm_failure_is_reported_as_health_and_result() -> None:
    cp = FakeControlPlane()
    cp.desired = {
        "lifecycle": "validating",
        "allocation_id": None,
        "tenant_id": None,
        "actions": [{"id": "act_r3", "action": "dcgm_r3", "params": {}}],
    }
    agent = make_agent(cp, scenario="row_remap_failed on gpu 2 at 0s")
    run(agent, 120)
    [res] = cp.action_results
    assert res["status"] == "failed" and "GPU 2" in res["detail"]
    checks = [c for r in cp.health_reports for c in r["checks"] if c["name"] == "dcgm_r3"]
    assert checks == [{"name": "dcgm_r3", "status": "fail", "detail": res["detail"]}]


def test_meters_only_while_active_with_allocation() -> None:
    cp = FakeControlPlane()
    cp.desired = {"lifecycle": "provisioning", "allocation_id": "alc_1", "tenant_id": "ten_1", "actions": []}
    agent = make_agent(cp)
    run(agent, 200)
    assert cp.ledger == {}
    cp.desired = {**cp.desired, "lifecycle": "active"}
    run(agent, 200, start=200)
    assert cp.ledger and {e["sku"] for e in cp.ledger.values()} == {"h100-sxm-8x"}
    assert agent.hardware.allocated


def test_unknown_action_fails_cleanly() -> None:
    cp = FakeControlPlane()
    cp.desired["actions"] = [{"id": "a1", "action": "flash_firmware", "params": {}}]
    agent = make_agent(cp)
    run(agent, 15)
    assert cp.action_results[0]["status"] == "failed"


GRANT = {
    "grant": "hgm1.opaque.sig",
    "allocation_id": "alc_1",
    "tenant_id": "ten_1",
    "sku": "a100-sxm-8x",
    "gpus": 8,
    "valid_from": "2026-11-29T19:00:00Z",
    "valid_until": "2026-11-30T02:00:00Z",
}


def test_every_meter_event_carries_the_grant_even_after_the_allocation_ends() -> None:
    cp = FakeControlPlane()
    cp.desired = {
        "lifecycle": "active",
        "allocation_id": "alc_1",
        "tenant_id": "ten_1",
        "actions": [],
        "sku": "h100-sxm-8x",
        "gpus": 8,
        "metering_grants": [GRANT],
    }
    agent = make_agent(cp)
    run(agent, 150)
    # released: desired-state no longer lists the allocation or its grant; the last partial
    # interval is still sent with the grant that covered it
    cp.desired = {
        "lifecycle": "releasing",
        "allocation_id": None,
        "tenant_id": None,
        "actions": [],
        "metering_grants": [],
    }
    run(agent, 120, start=150)
    events = list(cp.ledger.values())
    assert len(events) >= 3
    assert {e["grant"] for e in events} == {GRANT["grant"]}
    assert {e["sku"] for e in events} == {"a100-sxm-8x"}  # what the grant allows is what is metered


def test_events_outside_every_grant_are_sent_with_the_newest_one_and_refusals_are_logged(caplog) -> None:
    cp = FakeControlPlane()
    expired = {**GRANT, "valid_until": "2026-11-29T20:01:00Z"}
    cp.desired = {
        "lifecycle": "active",
        "allocation_id": "alc_1",
        "tenant_id": "ten_1",
        "actions": [],
        "metering_grants": [expired],
    }
    cp.rejected_ids_with_code = "outside_grant"
    agent = make_agent(cp)
    with caplog.at_level("WARNING"):
        run(agent, 200)
    assert cp.ledger and {e["grant"] for e in cp.ledger.values()} == {expired["grant"]}
    assert "refused by the ledger (outside_grant)" in caplog.text


def test_a_late_tick_does_not_push_later_heartbeats_late() -> None:
    """Heartbeats keep a 10 s cadence: one sent 0.8 s late (a slow pass) is followed by one
    due on the original beat, not 10 s after the late one; an agent a whole interval behind
    starts afresh instead of sending a burst."""
    cp = FakeControlPlane()
    agent = make_agent(cp)
    agent.tick(T0)
    assert agent.next_heartbeat == T0 + timedelta(seconds=10)
    agent.tick(T0 + timedelta(seconds=10.8))
    assert len(cp.heartbeats) == 2 and agent.next_heartbeat == T0 + timedelta(seconds=20)
    agent.tick(T0 + timedelta(seconds=20.1))
    assert len(cp.heartbeats) == 3 and agent.next_heartbeat == T0 + timedelta(seconds=30)
    agent.tick(T0 + timedelta(seconds=75))  # suspended past two deadlines: one heartbeat, a new cadence
    assert len(cp.heartbeats) == 4 and agent.next_heartbeat == T0 + timedelta(seconds=85)
    assert agent.next_desired is not None and agent.next_desired > T0 + timedelta(seconds=75)
