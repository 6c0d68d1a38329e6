"""The hardware backend protocol and the heartbeat's per-GPU telemetry shape."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

# Exactly the keys of a heartbeat `gpus[]` item (API.md, "Node agent API").
GPU_FIELDS = (
    "index", "uuid", "temperature_c", "power_w", "utilization_pct", "memory_used_mb",
    "ecc_sbe", "ecc_dbe", "retired_pages", "row_remap_pending", "row_remap_failed",
    "xid_errors", "nvlink_down", "energy_mj",
)


def blank_gpu(index: int, uuid: str) -> dict[str, Any]:
    """A GPU entry with counters at zero and unknown readings as None."""
    return {
        "index": index, "uuid": uuid, "temperature_c": None, "power_w": None,
        "utilization_pct": None, "memory_used_mb": None, "ecc_sbe": 0, "ecc_dbe": 0,
        "retired_pages": 0, "row_remap_pending": False, "row_remap_failed": False,
        "xid_errors": [], "nvlink_down": 0, "energy_mj": None,
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
        """Local drives: [{"device", "serial", "model"}], the targets of sanitize_drive."""

    def health_checks(self) -> list[dict[str, Any]]:
        """Checks the backend can judge by itself: [{"name", "status", "detail"}]."""


def nvme_drives(sys_block: Path = Path("/sys/block")) -> list[dict[str, Any]]:
    """NVMe namespaces from sysfs, e.g. {"device": "/dev/nvme0n1", "serial": "S6...", "model": "..."}."""
    drives = []
    for entry in sorted(sys_block.glob("nvme*n*")):
        device = entry / "device"
        drives.append({
            "device": f"/dev/{entry.name}",
            "serial": _read(device / "serial"),
            "model": _read(device / "model"),
        })
    return drives


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
