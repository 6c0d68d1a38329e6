"""The node's software and firmware stack: what the agent reads on a real host, and a simulated
stack with the variety a real fleet has.

Each component is {"component", "version", "state", "detail"}; `state` is `ok` (installed and
running or loaded), `inactive` (installed, not running), `failed` or `missing`. The control
plane stores them per node (POST /api/agent/v1/software-inventory), checks the bring-up
ladder against them and compares them with the node type's golden baseline.
"""

from __future__ import annotations

import platform
import re
import subprocess
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from random import Random
from typing import Any

from .executors import ActionRun, result

Runner = Callable[[list[str]], tuple[int, str]]


def _run(argv: list[str]) -> tuple[int, str]:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=15, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return 127, str(exc)
    return done.returncode, done.stdout


def component(name: str, version: str = "", state: str = "ok", detail: str = "") -> dict[str, Any]:
    return {"component": name, "version": version[:100], "state": state, "detail": detail[:300]}


def _xml_field(xml: str, tag: str) -> str:
    match = re.search(rf"<{tag}>([^<]*)</{tag}>", xml)
    return match[1].strip() if match else ""


def read_host_stack(run: Runner = _run, root: Path = Path("/")) -> list[dict[str, Any]]:
    """Read the stack of this host. Every probe is independent: one that cannot run reports its
    component `missing` with why, never aborts the others."""
    sys = root / "sys"
    stack = [component("kernel", platform.release())]
    code, xml = run(["nvidia-smi", "-q", "-x"])
    if code == 0 and "<nvidia_smi_log" in xml:
        stack.append(component("gpu_driver", _xml_field(xml, "driver_version")))
        vbios = sorted(set(re.findall(r"<vbios_version>([^<]*)</vbios_version>", xml)))
        detail = "GPUs disagree: " + ", ".join(vbios) if len(vbios) > 1 else ""
        stack.append(component("gpu_vbios", vbios[0] if vbios else "", "ok" if vbios else "missing", detail))
        stack.append(component("cuda", _xml_field(xml, "cuda_version")))
    else:
        loaded = (sys / "module" / "nvidia").exists()
        stack.append(
            component("gpu_driver", "", "failed" if loaded else "missing", "nvidia-smi failed: " + xml.strip()[:200])
        )
    code, out = run(["systemctl", "is-active", "nvidia-fabricmanager"])
    state = out.strip() or "unknown"
    if state == "active":
        _, version = run(["nv-fabricmanager", "--version"])
        match = re.search(r"(\d+\.\d+\.\d+)", version)
        stack.append(component("fabric_manager", match[1] if match else ""))
    elif state in ("inactive", "failed"):
        stack.append(component("fabric_manager", "", state, f"systemd: nvidia-fabricmanager {state}"))
    else:
        stack.append(component("fabric_manager", "", "missing", "nvidia-fabricmanager is not installed"))
    if (sys / "module" / "ib_core").exists():
        code, out = run(["ofed_info", "-s"])
        stack.append(component("ib_stack", out.strip().rstrip(":") if code == 0 else "inbox"))
    else:
        stack.append(component("ib_stack", "", "missing", "ib_core is not loaded"))
    peermem = sys / "module" / "nvidia_peermem"
    version_file = peermem / "version"
    stack.append(
        component("nvidia_peermem", version_file.read_text().strip() if version_file.exists() else "")
        if peermem.exists()
        else component("nvidia_peermem", "", "missing", "nvidia_peermem is not loaded")
    )
    nccl = sorted(
        (
            p.name
            for d in ("usr/lib/x86_64-linux-gnu", "usr/lib/aarch64-linux-gnu", "usr/lib64")
            for p in (root / d).glob("libnccl.so.*.*.*")
        ),
    )
    if nccl:
        stack.append(component("nccl", nccl[-1].removeprefix("libnccl.so.")))
    else:
        stack.append(component("nccl", "", "missing", "libnccl.so not found"))
    code, out = run(["nvidia-container-cli", "--version"])
    match = re.search(r"version:\s*(\S+)", out)
    if code == 0 and match:
        stack.append(component("container_toolkit", match[1]))
    else:
        stack.append(component("container_toolkit", "", "missing", "nvidia-container-cli not found"))
    return stack


# ---- simulated ----------------------------------------------------------------------------

# Released versions per generation, oldest first (NVIDIA's data-center driver branches and the
# fabric manager that must match the driver). The newest is what a fresh node gets most often;
# the older ones give a simulated fleet the drift a real one has.
DRIVERS = {
    "ampere": ("535.216.03", "550.127.08"),
    "hopper": ("550.127.08", "570.133.20"),
    "blackwell": ("570.133.20", "575.57.08"),
    "blackwell-ultra": ("575.57.08", "580.65.06"),
}
VBIOS = {
    "ampere": ("92.00.45.00.03",),
    "hopper": ("96.00.89.00.01", "96.00.A5.00.01"),
    "blackwell": ("97.00.52.00.01",),
    "blackwell-ultra": ("97.00.88.00.02",),
}
CUDA_OF_DRIVER = {"535": "12.2", "550": "12.4", "570": "12.8", "575": "12.9", "580": "13.0"}
KERNELS = ("5.15.0-126-generic", "6.8.0-49-generic")
OFED = "MLNX_OFED_LINUX-24.10-1.1.4.0"
NCCL = ("2.23.4", "2.25.1")
CONTAINER_TOOLKIT = ("1.16.2", "1.17.4")
OLDER_SHARE = 0.15  # nodes left on the previous driver branch by an earlier, unfinished upgrade


def known_versions(generation: str) -> set[str]:
    return set(DRIVERS[generation]) | set(VBIOS[generation])


class SimulatedStack:
    """One simulated node's stack. `missing` names components the node lacks (a layer skipped at
    image build), e.g. {"ib_stack"}, for bring-up scenarios."""

    def __init__(self, rng: Random, generation: str = "hopper", *, missing: set[str] | None = None) -> None:
        self.generation = generation if generation in DRIVERS else "hopper"
        older = rng.random() < OLDER_SHARE
        driver = DRIVERS[self.generation][0 if older else -1]
        self.versions: dict[str, str] = {
            "gpu_vbios": rng.choice(VBIOS[self.generation]),
            "kernel": KERNELS[-1] if rng.random() > 0.1 else KERNELS[0],
            "gpu_driver": driver,
            "fabric_manager": driver,
            "ib_stack": OFED,
            "nvidia_peermem": driver,
            "cuda": CUDA_OF_DRIVER[driver.split(".")[0]],
            "nccl": NCCL[-1] if not older else NCCL[0],
            "container_toolkit": CONTAINER_TOOLKIT[-1] if rng.random() > 0.1 else CONTAINER_TOOLKIT[0],
        }
        self.missing = set(missing or ())

    def components(self) -> list[dict[str, Any]]:
        stack = []
        for name, version in self.versions.items():
            if name in self.missing:
                stack.append(component(name, "", "missing", f"{name} is not installed"))
            elif name == "fabric_manager" and "ib_stack" in self.missing and self.generation.startswith("blackwell"):
                # Blackwell HGX: the fabric manager reaches the NVSwitches through a bridge device
                # that needs the IB stack; without it the service starts and fails
                stack.append(component(name, version, "failed", "NVSwitch bridge device not found"))
            else:
                stack.append(component(name, version))
        return stack

    def upgrade(self, versions: dict[str, str]) -> str | None:
        """Install `versions`; returns why not (an unknown package) or None once installed."""
        catalogue = (
            known_versions(self.generation) | set(CUDA_OF_DRIVER.values()) | {OFED, *NCCL, *KERNELS, *CONTAINER_TOOLKIT}
        )
        unknown = sorted(f"{c} {v}" for c, v in versions.items() if v not in catalogue)
        if unknown:
            return "package not found in the repository: " + ", ".join(unknown)
        self.versions.update({c: v for c, v in versions.items() if c in self.versions})
        if "gpu_driver" in versions:  # the fabric manager and peermem ship with the driver
            driver = versions["gpu_driver"]
            self.versions.update(
                fabric_manager=driver, nvidia_peermem=driver, cuda=CUDA_OF_DRIVER[driver.split(".")[0]]
            )
        self.missing -= set(versions)
        return None

    def reimage(self, versions: dict[str, str]) -> None:
        """A fresh image: every layer installed again, at `versions` where they are given (the
        golden baseline), whatever was changed or removed on the node before."""
        self.missing.clear()
        self.versions.update({c: str(v) for c, v in versions.items() if c in self.versions})


class SimulatedUpgrade:
    """The `upgrade` action on a simulated node: install packages and reboot, ~10-20 min."""

    def __init__(self, stack: SimulatedStack, rng: Random, wall: Callable[[float], timedelta]) -> None:
        self.stack, self.rng, self.wall = stack, rng, wall

    def start(self, params: dict[str, Any], now) -> ActionRun:
        versions = params.get("versions") or {}

        def outcome() -> dict[str, Any]:
            if not isinstance(versions, dict) or not versions:
                return result("failed", "upgrade needs params.versions {component: version}")
            why = self.stack.upgrade({str(k): str(v) for k, v in versions.items()})
            if why:
                return result("failed", why)
            return result("succeeded", "installed " + ", ".join(f"{c} {v}" for c, v in sorted(versions.items())))

        return _After(now + self.wall(self.rng.uniform(600, 1200)), outcome)


class _After:
    def __init__(self, done_at, outcome: Callable[[], dict[str, Any]]) -> None:
        self.done_at, self.outcome = done_at, outcome

    def poll(self, now) -> dict[str, Any] | None:
        return self.outcome() if now >= self.done_at else None
