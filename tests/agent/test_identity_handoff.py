"""The agent's side of identity per tenancy: when the control plane stops accepting its token
(the node's wipe began), it claims the new identity with the handoff its provisioning image
received, speaks with the new token from then on, keeps it (0600) and sends what waited."""

from __future__ import annotations

import json
import os
from datetime import timedelta
from random import Random
from typing import Any

from agent_fakes import T0, FakeControlPlane

from hangar_agent.agent import Agent
from hangar_agent.config import AgentConfig, load_config
from hangar_agent.executors import simulated_executors
from hangar_agent.hardware.simulated import SimulatedHardware
from hangar_agent.software import SimulatedStack
from hangar_agent.spool import Spool
from hangar_agent.transport import AuthError


class RotatingControlPlane(FakeControlPlane):
    """Accepts one token at a time; `rotate()` revokes it and hands out a one-time code."""

    def __init__(self) -> None:
        super().__init__()
        self.valid, self.token, self.code, self.claims = "old", "old", None, []

    def rotate(self) -> None:
        self.valid, self.code = "new", "one-time-code-0123456789"

    def _check(self) -> None:
        super()._check()
        if self.token != self.valid:
            raise AuthError("HTTP 401", status=401, body={"code": "authentication_failed"})

    def set_token(self, token: str) -> None:
        self.token = token

    def claim_identity(self, node_id: str, code: str) -> str:
        self.claims.append((node_id, code))
        if code != self.code:
            raise AuthError("HTTP 401", status=401, body={"code": "handoff_refused"})
        self.code = None  # once
        return "new"

    def software_inventory(self, payload: dict[str, Any]) -> Any:
        self._check()
        self.health_reports.append({"software": payload})


def make_agent(cp, tmp_path, handoff_file: str) -> Agent:
    hardware = SimulatedHardware(rng=Random(7), start=T0, random_faults=False, speed=10.0)
    token_file = tmp_path / "token"
    token_file.write_text("old")
    config = AgentConfig(
        url="http://cp",
        token="old",
        token_file=str(token_file),
        handoff_file=handoff_file,
        backend="simulated",
        sku="h100-sxm-8x",
    )
    stack = SimulatedStack(Random(3))
    return Agent(
        config=config,
        transport=cp,
        hardware=hardware,
        executors=simulated_executors(hardware, Random(8)),
        spool=Spool(":memory:"),
        rng=Random(9),
        software=stack.components,
    )


def run(agent: Agent, seconds: int, start: int = 0) -> None:
    for step in range(start, start + seconds):
        agent.tick(T0 + timedelta(seconds=step))


def test_a_refused_agent_claims_its_new_identity_from_the_handoff_and_keeps_it(tmp_path) -> None:
    cp = RotatingControlPlane()
    handoff = tmp_path / "handoff.json"
    agent = make_agent(cp, tmp_path, str(handoff))
    run(agent, 20)
    assert cp.heartbeats and not cp.claims
    beats = len(cp.heartbeats)

    cp.rotate()  # the node's wipe began: the old token is refused from now on
    run(agent, 30, start=20)
    assert len(cp.heartbeats) == beats and agent.identity_refused and cp.claims == []  # no handoff yet

    handoff.write_text(json.dumps({"node_id": "n1", "code": cp.code}))  # the wipe image is served it
    run(agent, 15, start=50)
    assert cp.claims == [("n1", "one-time-code-0123456789")]
    assert len(cp.heartbeats) > beats and not agent.identity_refused
    assert (tmp_path / "token").read_text() == "new"
    assert oct(os.stat(tmp_path / "token").st_mode & 0o777) == "0o600"
    assert not handoff.exists()
    assert any("software" in r for r in cp.health_reports)  # the new identity reports its stack at once
    assert load_config(None, url="http://cp", token_file=str(tmp_path / "token")).token == "new"


def test_a_refused_handoff_leaves_the_agent_waiting_not_crashing(tmp_path) -> None:
    cp = RotatingControlPlane()
    handoff = tmp_path / "handoff.json"
    handoff.write_text(json.dumps({"node_id": "n1", "code": "stale-code-from-an-old-boot"}))
    agent = make_agent(cp, tmp_path, str(handoff))
    cp.rotate()
    run(agent, 35)
    assert agent.identity_refused and len(cp.claims) >= 2  # retried once per desired-state interval
    assert (tmp_path / "token").read_text() == "old"


def test_the_simulated_wipe_reimages_the_stack_to_the_versions_it_is_given() -> None:
    stack = SimulatedStack(Random(3), missing={"ib_stack"})
    stack.versions["gpu_vbios"] = "tampered"
    stack.reimage({"gpu_vbios": "96.00.89.00.01", "kernel": "6.8.0-49-generic"})
    by_name = {c["component"]: c for c in stack.components()}
    assert by_name["gpu_vbios"]["version"] == "96.00.89.00.01" and by_name["ib_stack"]["state"] == "ok"
