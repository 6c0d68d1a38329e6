"""The hardware backend protocol and the heartbeat's per-GPU telemetry shape."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

# Exactly the keys of a heartbeat `gpus[]` item (docs/api.md, "Node agent API").
GPU_FIELDS = (
    "index",
    "uuid",
    "temperature_c",
    "power_w",
    "utilization_pct",
    "memory_used_mb",
    "ecc_sbe",
    "ecc_dbe",
    "retired_pages",
    "row_remap_pending",
    "row_remap_failed",
    "xid_errors",
    "xid_events",
    "nvlink_down",
    "recovery_action",
    "throttle_reasons",
    "slowdown_temp_c",
    "nvlink_errors_1h",
    "energy_mj",
)


def blank_gpu(index: int, uuid: str) -> dict[str, Any]:
    """A GPU entry with counters at zero and unknown readings as None."""
    return {
        "index": index,
        "uuid": uuid,
        "temperature_c": None,
        "power_w": None,
        "utilization_pct": None,
        "memory_used_mb": None,
        "ecc_sbe": 0,
        "ecc_dbe": 0,
        "retired_pages": 0,
        "row_remap_pending": False,
        "row_remap_failed": False,
        "xid_errors": [],
        "xid_events": [],
        "nvlink_down": 0,
        "recovery_action": None,
        "throttle_reasons": None,
        "slowdown_temp_c": None,
        "nvlink_errors_1h": None,
        "energy_mj": None,
    }


class HardwareBackend(Protocol):
    """What the agent reads from the machine.

    `gpus()` consumes XID events: each call returns the XIDs seen since the
    previous call, so the heartbeat reports events, not a running total.
    """

    def advance(self, now: datetime, *, allocated: bool) -> None:
        """Move time-driven backends (the simulator) to `now`; real hardware ignores it."""

    def gpus(self) -> list[dict[str, Any]]: ...

    def wall_power(self) -> dict[str, Any] | None:
        """The node's wall draw from a meter, {"watts", "source": "bmc"|"pdu", "energy_j"} (a
        cumulative counter), or None where the backend has no meter to read."""

    def power_state(self) -> str:
        """`on`, `off` or `unknown` (a host that is off runs no agent: the tick does nothing)."""

    def drives(self) -> list[dict[str, Any]]:
        """Local drives, the targets of sanitize_drive and the inventory the health report sends:
        [{"device", "serial", "model", "capacity_gb", "self_encrypting", "purge_supported"}]."""

    def ib_ports(self) -> list[dict[str, Any]]:
        """InfiniBand ports: [{"port", "state", "link_downed_1h", "symbol_errors_1h"}]."""

    def health_checks(self) -> list[dict[str, Any]]:
        """Checks the backend can judge by itself: [{"name", "status", "detail"}]."""


def nvme_capabilities(id_ctrl: dict[str, Any]) -> tuple[bool, bool]:
    """(self_encrypting, purge_supported) from `nvme id-ctrl -o json` (NVMe base spec):
    FNA bit 2 = cryptographic erase supported by Format (the drive encrypts all user data);
    SANICAP bits 0-2 = Sanitize crypto erase / block erase / overwrite (a NIST purge)."""
    fna = int(id_ctrl.get("fna") or 0)
    sanicap = int(id_ctrl.get("sanicap") or 0)
    crypto = bool(fna & 0x4) or bool(sanicap & 0x1)
    return crypto, crypto or bool(sanicap & 0x7)


def _id_ctrl(device: str) -> dict[str, Any]:
    try:
        done = subprocess.run(
            ["nvme", "id-ctrl", device, "-o", "json"], capture_output=True, text=True, timeout=10, check=False
        )
        return json.loads(done.stdout) if done.returncode == 0 else {}
    except (OSError, ValueError, subprocess.SubprocessError):
        return {}


def nvme_drives(
    sys_block: Path = Path("/sys/block"), id_ctrl: Callable[[str], dict[str, Any]] = _id_ctrl
) -> list[dict[str, Any]]:
    """NVMe namespaces from sysfs, e.g. {"device": "/dev/nvme0n1", "serial": "S6...", "model": "...",
    "capacity_gb": 3840, "self_encrypting": True, "purge_supported": True}. Capabilities come
    from the controller's identify data; a drive that cannot be asked reads as neither."""
    drives = []
    for entry in sorted(sys_block.glob("nvme*n*")):
        device = entry / "device"
        sectors = _read(entry / "size")
        controller = f"/dev/{device.resolve().name}" if device.exists() else f"/dev/{entry.name}"
        sed, purge = nvme_capabilities(id_ctrl(controller))
        drives.append(
            {
                "device": f"/dev/{entry.name}",
                "serial": _read(device / "serial"),
                "model": _read(device / "model"),
                "capacity_gb": int(sectors) * 512 // 10**9 if sectors.isdigit() else 0,
                "self_encrypting": sed,
                "purge_supported": purge,
            }
        )
    return drives


class CounterWindow:
    """Increase of monotonically growing counters over a sliding window (link flaps, error
    counters): the hardware counts every event, so flaps between two samples are not missed."""

    def __init__(self, window_s: float = 3600.0) -> None:
        self.window_s = window_s
        self.samples: dict[str, list[tuple[float, int]]] = {}

    def increase(self, key: str, t: float, value: int) -> int:
        samples = self.samples.setdefault(key, [])
        if samples and value < samples[-1][1]:
            samples.clear()  # the counter was reset (driver reload): start again
        samples.append((t, value))
        while len(samples) > 1 and samples[1][0] <= t - self.window_s:
            samples.pop(0)
        return value - samples[0][1]


def ib_ports(
    sys_ib: Path = Path("/sys/class/infiniband"), window: CounterWindow | None = None, now: float = 0.0
) -> list[dict[str, Any]]:
    """Every InfiniBand port's state and its link-down and symbol-error counts over the window."""
    window = window or CounterWindow()
    ports = []
    for state in sorted(sys_ib.glob("*/ports/*/state")):
        port = f"{state.parents[2].name}/{state.parent.name}"
        counters = state.parent / "counters"
        entry = {"port": port, "state": _read(state) or "unknown"}
        for name, field_name in (("link_downed", "link_downed_1h"), ("symbol_error", "symbol_errors_1h")):
            raw = _read(counters / name)
            if raw.isdigit():
                entry[field_name] = window.increase(f"{port}:{name}", now, int(raw))
        ports.append(entry)
    return ports


def ib_link_checks(sys_ib: Path = Path("/sys/class/infiniband")) -> list[dict[str, Any]]:
    """One `ib_link` check over all InfiniBand ports: fail if any port is not ACTIVE."""
    ports = sorted(sys_ib.glob("*/ports/*/state"))
    if not ports:
        return []
    down = [f"{p.parents[2].name}/{p.parent.name}: {_read(p)}" for p in ports if "ACTIVE" not in _read(p)]
    if down:
        return [{"name": "ib_link", "status": "fail", "detail": "ports not active: " + ", ".join(down)}]
    return [{"name": "ib_link", "status": "pass", "detail": f"{len(ports)} ports active"}]


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""
