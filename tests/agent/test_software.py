"""The agent's software inventory: read from a real host's tools, synthesised with variety on
simulated nodes, sent on its own schedule and right after an upgrade."""

from __future__ import annotations

from datetime import timedelta
from random import Random

from agent_fakes import T0, FakeControlPlane

from hangar_agent.agent import Agent
from hangar_agent.config import AgentConfig
from hangar_agent.executors import simulated_executors
from hangar_agent.hardware.simulated import SimulatedHardware
from hangar_agent.software import DRIVERS, SimulatedStack, SimulatedUpgrade, read_host_stack
from hangar_agent.spool import Spool

SMI_XML = """<?xml version="1.0" ?><nvidia_smi_log><driver_version>570.133.20</driver_version>
<cuda_version>12.8</cuda_version><gpu id="00000000:18:00.0"><vbios_version>96.00.89.00.01</vbios_version></gpu>
<gpu id="00000000:2A:00.0"><vbios_version>96.00.89.00.01</vbios_version></gpu></nvidia_smi_log>"""


def _host(tmp_path, *, ib=True, peermem=True, nccl=True):
    for module, present in (("nvidia", True), ("ib_core", ib), ("nvidia_peermem", peermem)):
        if present:
            (tmp_path / "sys" / "module" / module).mkdir(parents=True)
    (tmp_path / "sys" / "module" / "nvidia_peermem" / "version").write_text("570.133.20\n") if peermem else None
    lib = tmp_path / "usr" / "lib" / "x86_64-linux-gnu"
    lib.mkdir(parents=True)
    if nccl:
        (lib / "libnccl.so.2.25.1").write_text("")
    return tmp_path


def _runner(fm_state="active", smi=SMI_XML):
    answers = {
        "nvidia-smi": (0, smi),
        "systemctl": (0 if fm_state == "active" else 3, fm_state + "\n"),
        "nv-fabricmanager": (0, "Fabric Manager version is : 570.133.20\n"),
        "ofed_info": (0, "MLNX_OFED_LINUX-24.10-1.1.4.0:\n"),
        "nvidia-container-cli": (0, "cli-version: 1.17.4\nlib-version: 1.17.4\n"),
    }
    return lambda argv: answers.get(argv[0], (127, "not found"))


def test_a_real_hosts_stack_is_read_from_its_tools(tmp_path):
    stack = {c["component"]: c for c in read_host_stack(_runner(), root=_host(tmp_path))}
    assert {k: (v["version"], v["state"]) for k, v in stack.items() if k != "kernel"} == {
        "gpu_driver": ("570.133.20", "ok"),
        "gpu_vbios": ("96.00.89.00.01", "ok"),
        "cuda": ("12.8", "ok"),
        "fabric_manager": ("570.133.20", "ok"),
        "ib_stack": ("MLNX_OFED_LINUX-24.10-1.1.4.0", "ok"),
        "nvidia_peermem": ("570.133.20", "ok"),
        "nccl": ("2.25.1", "ok"),
        "container_toolkit": ("1.17.4", "ok"),
    }
    assert stack["kernel"]["version"]


def test_missing_layers_are_reported_missing_with_why(tmp_path):
    stack = {
        c["component"]: c
        for c in read_host_stack(_runner(fm_state="failed"), root=_host(tmp_path, ib=False, peermem=False, nccl=False))
    }
    assert stack["fabric_manager"]["state"] == "failed"
    assert (stack["ib_stack"]["state"], stack["ib_stack"]["detail"]) == ("missing", "ib_core is not loaded")
    assert stack["nvidia_peermem"]["state"] == "missing"
    assert stack["nccl"]["state"] == "missing"


def test_a_broken_driver_is_failed_not_absent(tmp_path):
    stack = {c["component"]: c for c in read_host_stack(_runner(smi="NVIDIA-SMI has failed"), root=_host(tmp_path))}
    assert stack["gpu_driver"]["state"] == "failed" and "NVIDIA-SMI has failed" in stack["gpu_driver"]["detail"]


def test_a_simulated_fleet_has_realistic_variety():
    drivers = [
        {c["component"]: c["version"] for c in SimulatedStack(Random(seed), "hopper").components()}["gpu_driver"]
        for seed in range(400)
    ]
    older = drivers.count(DRIVERS["hopper"][0]) / len(drivers)
    assert set(drivers) == set(DRIVERS["hopper"]) and 0.08 < older < 0.25


def test_blackwell_without_ib_stack_shows_the_fabric_manager_failing():
    stack = {c["component"]: c for c in SimulatedStack(Random(1), "blackwell", missing={"ib_stack"}).components()}
    assert stack["ib_stack"]["state"] == "missing"
    assert (stack["fabric_manager"]["state"], stack["fabric_manager"]["detail"]) == (
        "failed",
        "NVSwitch bridge device not found",
    )


def _agent(cp, stack):
    hardware = SimulatedHardware(rng=Random(7), start=T0, random_faults=False, speed=10.0)
    executors = simulated_executors(hardware, Random(8))
    executors["upgrade"] = SimulatedUpgrade(stack, Random(3), hardware.wall)
    config = AgentConfig(url="http://cp", token="t", backend="simulated", software_inventory_interval=900)
    return Agent(
        config=config,
        transport=cp,
        hardware=hardware,
        executors=executors,
        spool=Spool(":memory:"),
        rng=Random(9),
        software=stack.components,
    )


class _Plane(FakeControlPlane):
    def __init__(self):
        super().__init__()
        self.software_reports = []

    def software_inventory(self, payload):
        self._check()
        self.software_reports.append(payload)


def test_the_agent_reports_its_stack_on_schedule_and_after_an_upgrade():
    cp, stack = _Plane(), SimulatedStack(Random(2), "hopper")
    stack.versions["gpu_driver"] = DRIVERS["hopper"][0]
    agent = _agent(cp, stack)
    for s in range(60):
        agent.tick(T0 + timedelta(seconds=s))
    assert len(cp.software_reports) == 1
    cp.desired["actions"] = [{"id": "u1", "action": "upgrade", "params": {"versions": {"gpu_driver": "570.133.20"}}}]
    for s in range(60, 60 + 200):  # 10-20 simulated minutes at speed 10
        agent.tick(T0 + timedelta(seconds=s))
    assert cp.action_results[-1]["status"] == "succeeded"
    latest = {c["component"]: c["version"] for c in cp.software_reports[-1]["components"]}
    assert latest["gpu_driver"] == latest["fabric_manager"] == "570.133.20"
    assert len(cp.software_reports) == 2  # the upgrade's report, before the 15 min schedule


def test_an_upgrade_to_an_unknown_version_fails_and_changes_nothing():
    stack = SimulatedStack(Random(2), "hopper")
    before = dict(stack.versions)
    assert "package not found" in stack.upgrade({"gpu_driver": "999.99.99"})
    assert stack.versions == before
