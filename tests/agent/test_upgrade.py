"""The real agent's `upgrade` executor: a rollout's versions installed through the configured
command per component (argument lists, never a shell), the outcome reported, then a fresh
software inventory."""

from __future__ import annotations

import sys
import time
from datetime import timedelta
from random import Random

import pytest
from agent_fakes import T0, FakeControlPlane

from hangar_agent.agent import Agent
from hangar_agent.config import AgentConfig, ConfigError, load_config
from hangar_agent.executors import CommandResult, SubprocessRunner
from hangar_agent.hardware.simulated import SimulatedHardware
from hangar_agent.spool import Spool
from hangar_agent.upgrade import UpgradeExecutor

COMMANDS = {
    "gpu_driver": ["apt-get", "install", "-y", "--allow-downgrades", "nvidia-driver={version}"],
    "kernel": ["apt-get", "install", "-y", "linux-image-{version}"],
    "nccl": ["apt-get", "install", "-y", "libnccl2={version}"],
}


class FakePackageManager:
    """A CommandRunner standing in for apt-get: records argv, installs into `installed`,
    fails for the packages in `fail`, and takes `ticks` polls to finish."""

    def __init__(self, fail=(), ticks=2):
        self.calls: list[list[str]] = []
        self.installed = {"gpu_driver": "550.127.08", "kernel": "6.8.0-45-generic", "nccl": "2.21.5"}
        self.fail, self.ticks = set(fail), ticks

    def start(self, argv):
        self.calls.append(list(argv))
        manager = self

        class Running:
            polls = 0

            def poll(self):
                self.polls += 1
                if self.polls < manager.ticks:
                    return None
                package = argv[-1]
                if any(package.startswith(f) for f in manager.fail):
                    return CommandResult(tuple(argv), 100, "", f"E: Version '{package}' not found")
                name, _, version = package.replace("linux-image-", "kernel=").partition("=")
                component = {"nvidia-driver": "gpu_driver", "kernel": "kernel", "libnccl2": "nccl"}[name]
                manager.installed[component] = version
                return CommandResult(tuple(argv), 0, "", "")

        return Running()

    def stack(self):
        return [{"component": c, "version": v, "state": "ok"} for c, v in sorted(self.installed.items())]


class _Plane(FakeControlPlane):
    def __init__(self):
        super().__init__()
        self.software_reports = []

    def software_inventory(self, payload):
        self._check()
        self.software_reports.append(payload)


def _agent(cp, manager):
    hardware = SimulatedHardware(rng=Random(7), start=T0, random_faults=False)
    config = AgentConfig(url="http://cp", token="t", backend="simulated", upgrade_commands=COMMANDS)
    return Agent(
        config=config,
        transport=cp,
        hardware=hardware,
        executors={"upgrade": UpgradeExecutor(config.upgrade_commands, manager)},
        spool=Spool(":memory:"),
        rng=Random(9),
        software=manager.stack,
    )


def _run(cp, agent, versions, seconds=40):
    cp.desired["actions"] = [
        {"id": f"u{len(cp.action_results)}", "action": "upgrade", "params": {"versions": versions}}
    ]
    start = T0 + timedelta(seconds=100 * (len(cp.action_results) + 1))
    for s in range(seconds):
        agent.tick(start + timedelta(seconds=s))
    return cp.action_results[-1]


def test_an_upgrade_runs_each_components_command_in_order_and_reports_the_new_stack():
    cp, manager = _Plane(), FakePackageManager()
    agent = _agent(cp, manager)
    agent.tick(T0)
    reports_before = len(cp.software_reports)
    outcome = _run(
        cp, agent, {"nccl": "2.25.1-1+cuda12.8", "gpu_driver": "570.133.20-0ubuntu1", "kernel": "6.8.0-49-generic"}
    )
    assert outcome["status"] == "succeeded", outcome
    assert manager.calls == [  # kernel before driver before NCCL, whatever order the server sent
        ["apt-get", "install", "-y", "linux-image-6.8.0-49-generic"],
        ["apt-get", "install", "-y", "--allow-downgrades", "nvidia-driver=570.133.20-0ubuntu1"],
        ["apt-get", "install", "-y", "libnccl2=2.25.1-1+cuda12.8"],
    ]
    assert outcome["detail"].startswith("installed kernel 6.8.0-49-generic, gpu_driver 570.133.20-0ubuntu1")
    assert len(cp.software_reports) == reports_before + 1  # right after, not on the 15 min schedule
    latest = {c["component"]: c["version"] for c in cp.software_reports[-1]["components"]}
    assert latest["gpu_driver"] == "570.133.20-0ubuntu1" and latest["nccl"] == "2.25.1-1+cuda12.8"


def test_a_failing_command_stops_the_upgrade_says_which_and_still_reports_the_stack():
    cp, manager = _Plane(), FakePackageManager(fail={"nvidia-driver"})
    agent = _agent(cp, manager)
    agent.tick(T0)
    reports_before = len(cp.software_reports)
    outcome = _run(cp, agent, {"gpu_driver": "999.1", "kernel": "6.8.0-49-generic", "nccl": "2.25.1"})
    assert outcome["status"] == "failed"
    assert "upgrade of gpu_driver to 999.1 failed" in outcome["detail"] and "not found" in outcome["detail"]
    assert (
        "installed first: kernel 6.8.0-49-generic" in outcome["detail"] and "not attempted: nccl" in outcome["detail"]
    )
    assert len(manager.calls) == 2 and manager.installed["nccl"] == "2.21.5"
    assert len(cp.software_reports) == reports_before + 1
    assert {c["component"]: c["version"] for c in cp.software_reports[-1]["components"]}["kernel"] == "6.8.0-49-generic"


@pytest.mark.parametrize(
    "versions, why",
    [
        ({"gpu_driver": "570; rm -rf /"}, "not a package version"),
        ({"gpu_driver": "--config=/tmp/evil"}, "not a package version"),
        ({"gpu_driver": "570.1 "}, "not a package version"),
        ({"gpu_driver": 570}, "not a package version"),
        ({"gpu_driver": "x" * 101}, "not a package version"),
        ({"bios": "2.3.1"}, "no upgrade command for bios"),
        ({}, "needs params.versions"),
        ("570", "needs params.versions"),
    ],
)
def test_server_input_that_is_not_a_version_runs_nothing(versions, why):
    manager = FakePackageManager()
    run = UpgradeExecutor(COMMANDS, manager).start({"versions": versions}, T0)
    outcome = run.poll(T0)
    assert outcome["status"] == "failed" and why in outcome["detail"]
    assert manager.calls == []


def test_the_command_runs_as_an_argument_list_never_through_a_shell(tmp_path):
    record = tmp_path / "argv.txt"
    script = tmp_path / "fake_apt.py"
    script.write_text(f"import sys\nopen({str(record)!r}, 'w').write(repr(sys.argv[1:]))\n")
    executor = UpgradeExecutor(
        {"gpu_driver": [sys.executable, str(script), "install", "nvidia-driver={version}"]}, SubprocessRunner()
    )
    run = executor.start({"versions": {"gpu_driver": "570.133.20+cuda~12:8"}}, T0)
    outcome = None
    for _ in range(200):
        if (outcome := run.poll(T0)) is not None:
            break
        time.sleep(0.02)
    assert outcome["status"] == "succeeded", outcome
    assert record.read_text() == repr(["install", "nvidia-driver=570.133.20+cuda~12:8"])


def test_upgrade_commands_are_checked_when_the_config_loads(tmp_path):
    good = tmp_path / "agent.toml"
    good.write_text(
        'url = "https://cp"\ntoken = "t"\n[upgrade_commands]\ngpu_driver = ["apt-get", "install", "-y", "nvidia-driver={version}"]\n'
    )
    assert load_config(good).upgrade_commands["gpu_driver"][-1] == "nvidia-driver={version}"
    for bad, why in (
        ('gpu_driver = "apt-get install nvidia-driver={version}"', "not a shell string"),
        ('gpu_driver = ["apt-get", "install", "nvidia-driver"]', "{version} must appear"),
        ('gpu_driver = ["{version}", "install"]', "{version} must appear"),
        ('"GPU driver" = ["apt-get", "{version}"]', "not a component name"),
    ):
        path = tmp_path / "bad.toml"
        path.write_text(f'url = "https://cp"\ntoken = "t"\n[upgrade_commands]\n{bad}\n')
        with pytest.raises(ConfigError, match=why.replace("{", r"\{").replace("}", r"\}")):
            load_config(path)
