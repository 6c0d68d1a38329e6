"""Simulated GPU node: plausible telemetry, realistic timings and faults at reference rates.

Faults arrive as a Poisson process at the per-GPU rate (`interruptions_per_node_day` is
derived for 8-GPU nodes, so a 4-GPU GB200 tray sees half of it) with the full Llama 3 cause
mix as published — the causes the table lists plus "other" for the share it leaves
unnamed, never renormalised — both read from core/reference/reliability.csv, and become the
concrete signals a real node would show (XIDs, ECC and row-remap counters, NVLink
down, IB link failures, lost heartbeats). `speed` compresses time: every rate and
duration is per simulated second, and simulated seconds = wall seconds x speed.
All randomness comes from an injected `random.Random`, so runs are reproducible.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from random import Random
from typing import Any

from .base import blank_gpu
from .faults import FaultProcess, ScriptedFault, parse_scenario
from .reference import PROFILES, ReliabilityReference, load_host_share_w, load_reliability, node_wall_w


@dataclass
class _GpuState:
    uuid: str
    ecc_sbe: int = 0
    ecc_dbe: int = 0
    retired_pages: int = 0
    row_remap_pending: bool = False
    row_remap_failed: bool = False
    nvlink_down: int = 0
    thermal_fault: bool = False  # a failed thermal interface or sensor: throttles until repaired
    needs_reset: bool = False
    lost: bool = False
    xids: list[int] = field(default_factory=list)
    xid_events: list[dict[str, Any]] = field(default_factory=list)


SIMULATED_DRIVER = "575.57.08"
# The recovery action the driver reports with Xid 154 beside each Xid (0 None, 1 GPU reset,
# 2 node reboot, 4 drain and reset): a contained error needs nothing now, the rest a reset.
XID_154_ACTION = {94: 0, 95: 1, 48: 4, 62: 1, 109: 1, 120: 1, 74: 1, 79: 2}


class SimulatedHardware:
    """A node's GPUs, drives and links, driven by the time the agent passes to `advance`."""

    def __init__(
        self,
        *,
        rng: Random | None = None,
        start: datetime | None = None,
        generation: str = "hopper",
        gpu_count: int = 8,
        speed: float = 1.0,
        hostname: str | None = None,
        scenario: str | list[dict[str, Any]] | None = None,
        random_faults: bool = True,
        reference: ReliabilityReference | None = None,
        drives: list[dict[str, Any]] | None = None,
        counter_file: str | Path | None = None,
    ) -> None:
        if generation not in PROFILES:
            raise ValueError(f"unknown generation {generation!r}; known: {', '.join(PROFILES)}")
        self.rng = rng or Random()
        self.speed = speed
        self.hostname = hostname
        self.reference = reference or load_reliability()
        self.memory_mb, self.idle_w, self.busy_w = PROFILES[generation]
        self.generation_family = "blackwell" if generation.startswith("blackwell") else generation
        self.host_share_w = load_host_share_w(generation) * gpu_count / 8
        # Cumulative energy counters (the BMC's, J; each GPU's, mJ). A real BMC and driver keep
        # theirs across an agent restart; the simulator keeps them in `counter_file`.
        self.counter_file = Path(counter_file) if counter_file else None
        self.wall_energy_j = 0.0
        self._gpu_count = gpu_count
        self.gpu_energy_mj = [0.0] * gpu_count
        self._load_counters()
        self.gpu_state = [
            _GpuState(uuid=f"GPU-{uuid.UUID(int=self.rng.getrandbits(128), version=4)}") for _ in range(gpu_count)
        ]
        # The drives the node was enrolled with (serial, model, capacity_gb, self_encrypting,
        # purge_supported) when the simulator knows them; else a boot and a scratch drive.
        self.drive_inventory = (
            [dict(d) for d in drives]
            if drives
            else [
                {
                    "serial": f"SIM{self.rng.getrandbits(40):012X}",
                    "model": "SIM NVMe 3.84TB",
                    "capacity_gb": 3840,
                    "self_encrypting": i == 0,
                    "purge_supported": True,
                }
                for i in range(2)
            ]
        )
        self.serials = [d["serial"] for d in self.drive_inventory]
        self.allocated = False
        self.offline_until: datetime | None = None
        self.ib_fail_until: datetime | None = None
        self.nic_failed = False
        self.sdc = False
        self.fault_log: list[dict[str, Any]] = []
        self.now = start
        self.process = FaultProcess(self.rng, self.reference, gpu_count) if random_faults else None
        self.next_random_fault: datetime | None = None
        self.script = [
            f for f in parse_scenario(scenario or []) if f.node is None or hostname is None or f.node == hostname
        ]
        if start is not None:
            self._arm(start)

    def wall(self, simulated_seconds: float) -> timedelta:
        """The wall-clock span of a simulated duration at this speed."""
        return timedelta(seconds=simulated_seconds / self.speed)

    def _gpu_mean_w(self, busy: bool) -> float:
        low, high = self.busy_w if busy else self.idle_w
        return (low + high) / 2

    def wall_w(self) -> float:
        """The node's modelled wall draw now (0 while it is off)."""
        if self.power_state() == "off":
            return 0.0
        gpus = sum(self._gpu_mean_w(self.allocated) for s in self.gpu_state if not s.lost)
        return node_wall_w(gpus, self.host_share_w, 1.0 if self.allocated else 0.0)

    def _accrue(self, now: datetime) -> None:
        """Run the energy counters from the last moment to `now` at the draw of that span. Energy
        is counted in wall-clock seconds even when `speed` compresses fault time: the control
        plane divides counter deltas by its own clock, and a faster counter would read as an
        impossible draw."""
        if self.now is None or now <= self.now:
            return
        seconds = (now - self.now).total_seconds()
        if self.power_state() == "off":
            return
        self.wall_energy_j += self.wall_w() * seconds
        per_gpu_mj = self._gpu_mean_w(self.allocated) * seconds * 1000
        for index, state in enumerate(self.gpu_state):
            if not state.lost:
                self.gpu_energy_mj[index] += per_gpu_mj

    def wall_power(self) -> dict[str, Any] | None:
        """The simulated BMC's reading: chassis power and its energy counter."""
        self._save_counters()
        return {"watts": round(self.wall_w(), 1), "source": "bmc", "energy_j": int(self.wall_energy_j)}

    def _load_counters(self) -> None:
        if self.counter_file is None or not self.counter_file.exists():
            return
        try:
            saved = json.loads(self.counter_file.read_text())
            self.wall_energy_j = float(saved["wall_energy_j"])
            gpus = [float(v) for v in saved["gpu_energy_mj"]]
            self.gpu_energy_mj = (gpus + [0.0] * self._gpu_count)[: self._gpu_count]
        except (OSError, ValueError, KeyError, TypeError):
            pass  # unreadable: the counters start again, and the control plane sees a reset

    def _save_counters(self) -> None:
        if self.counter_file is None:
            return
        tmp = self.counter_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"wall_energy_j": self.wall_energy_j, "gpu_energy_mj": self.gpu_energy_mj}))
        os.replace(tmp, self.counter_file)  # atomic: a crash leaves the old counters or the new

    def advance(self, now: datetime, *, allocated: bool) -> None:
        if self.now is None:
            self._arm(now)
        self._accrue(now)
        self.now = now
        self.allocated = allocated
        while self.script and self.start + self.wall(self.script[0].at) <= now:
            self._apply_scripted(self.script.pop(0))
        while self.next_random_fault is not None and self.next_random_fault <= now:
            at = self.next_random_fault
            self.inject_cause(self.process.cause(), at=at)
            self.next_random_fault = at + self.wall(self.process.next_gap_seconds())

    def power_state(self) -> str:
        return "off" if self.offline_until is not None and self.now < self.offline_until else "on"

    def gpus(self) -> list[dict[str, Any]]:
        result = []
        for index, state in enumerate(self.gpu_state):
            if state.lost and not state.xids:
                continue  # fell off the bus: the driver no longer sees it
            busy = self.allocated
            gpu = blank_gpu(index, state.uuid)
            gpu.update(
                temperature_c=self.rng.randint(65, 80) if busy else self.rng.randint(30, 40),
                power_w=round(self.rng.uniform(*(self.busy_w if busy else self.idle_w)), 1),
                utilization_pct=self.rng.randint(85, 100) if busy else 0,
                memory_used_mb=(
                    self.rng.randint(int(self.memory_mb * 0.7), int(self.memory_mb * 0.95))
                    if busy
                    else self.rng.randint(0, 600)
                ),
                ecc_sbe=state.ecc_sbe,
                ecc_dbe=state.ecc_dbe,
                retired_pages=state.retired_pages,
                row_remap_pending=state.row_remap_pending,
                row_remap_failed=state.row_remap_failed,
                xid_errors=state.xids,
                xid_events=state.xid_events,
                nvlink_down=state.nvlink_down,
                throttle_reasons=0x40 if state.thermal_fault else 0,
                energy_mj=int(self.gpu_energy_mj[index]),
            )
            if state.thermal_fault:
                gpu["temperature_c"] = self.rng.randint(90, 95)
            state.xids, state.xid_events = [], []
            result.append(gpu)
        return result

    def drives(self) -> list[dict[str, Any]]:
        return [{"device": f"/dev/nvme{i}n1", **d} for i, d in enumerate(self.drive_inventory)]

    def ib_ports(self) -> list[dict[str, Any]]:
        down = self.nic_failed or (
            self.ib_fail_until is not None and self.now is not None and self.now < self.ib_fail_until
        )
        return [
            {
                "port": "mlx5_0/1",
                "state": "1: DOWN" if down else "4: ACTIVE",
                "link_downed_1h": 1 if down else 0,
                "symbol_errors_1h": 0,
            }
        ]

    def health_checks(self) -> list[dict[str, Any]]:
        ib_down = self.nic_failed or (self.ib_fail_until is not None and self.now < self.ib_fail_until)
        return [
            {
                "name": "ib_link",
                "status": "fail" if ib_down else "pass",
                "detail": "mlx5_0/1: DOWN" if ib_down else "8 ports active",
            },
            {
                "name": "nccl_allreduce",
                "status": "fail" if self.sdc else "pass",
                "detail": "allreduce result mismatch on rank 3" if self.sdc else "bus bandwidth nominal",
            },
            {"name": "nvme_smart", "status": "pass", "detail": f"{len(self.serials)} drives healthy"},
        ]

    # -- fault injection and repair (used by the scenario, the fault process and executors)

    def inject_cause(self, cause: str, *, gpu: int | None = None, at: datetime | None = None) -> None:
        """Turn an interruption cause into the signals a real node shows."""
        at = at or self.now
        index = gpu if gpu is not None else self.rng.randrange(len(self.gpu_state))
        self.fault_log.append({"at": at, "cause": cause, "gpu": index})
        pick = self.rng.random()
        if cause == "gpu":
            self.inject_xid(index, 79 if pick < 0.5 else 74 if pick < 0.8 else 62)
        elif cause == "hbm3":
            # An uncorrectable HBM error: XID 48 and a row remap pending until the next reset
            # (NVIDIA memory error management). No published split says how many end in a remap
            # failure (XID 64), so random faults never invent one; scenarios can.
            self.inject_xid(index, 48)
        elif cause == "software":
            self.inject_xid(index, self.rng.choice((13, 31, 43)))
        elif cause == "network_switch_cable":
            self.ib_fail_until = at + self.wall(self.rng.uniform(1800, 4 * 3600))
        elif cause == "host_maintenance":
            self.offline_until = at + self.wall(self.rng.uniform(900, 5400))
        elif cause == "sram":
            self.inject_xid(index, 94 if pick < 0.7 else 95)
        elif cause == "gpu_system_processor":
            self.inject_xid(index, 119 if pick < 0.5 else 120)
        elif cause == "nic":
            self.nic_failed = True
        elif cause == "silent_data_corruption":
            self.sdc = True
        elif cause == "gpu_thermal":
            self.gpu_state[index].thermal_fault = True
        elif cause == "other":
            # the causes the table leaves unnamed (host parts, dependencies): the host hangs and
            # stops reporting until it is power-cycled or its lease expires
            self.offline_until = at + self.wall(self.rng.uniform(600, 3600))
        else:
            raise ValueError(f"unknown cause {cause!r}")

    def driver(self) -> dict[str, Any]:
        return {"driver_version": SIMULATED_DRIVER, "gpu_architecture": self.generation_family}

    def inject_xid(self, gpu: int, xid: int, **fields: Any) -> None:
        """Record the XID event (with its kernel-log detail) and its lasting side effects on the
        GPU. From driver R565 a recovery-action Xid 154 accompanies the Xids that change it."""
        state = self.gpu_state[gpu]
        state.xids.append(xid)
        state.xid_events.append({"xid": xid, **fields})
        if xid in XID_154_ACTION and 154 not in state.xids:
            state.xids.append(154)
            state.xid_events.append({"xid": 154, "recovery_action": XID_154_ACTION[xid]})
        if xid == 79:
            state.lost = True
        elif xid == 74:
            state.nvlink_down = max(state.nvlink_down, self.rng.randint(1, 2))
        elif xid == 48:
            state.ecc_dbe += 1
            state.row_remap_pending = True
            state.xids.append(63)
            state.xid_events.append({"xid": 63})
        elif xid == 64:
            state.row_remap_failed = True
        elif xid == 94:
            state.ecc_sbe += 1
        elif xid == 95:
            state.ecc_dbe += 1
            state.needs_reset = True
        elif xid in (46, 62, 109, 119, 120, 136, 140):
            state.needs_reset = True

    def fault_summary(self, level: int = 3) -> list[str]:
        """What a DCGM run at `level` would catch now (empty: the node passes)."""
        problems = []
        for index, s in enumerate(self.gpu_state):
            if s.lost:
                problems.append(f"GPU {index} not found on the PCI bus")
            if s.nvlink_down:
                problems.append(f"GPU {index}: {s.nvlink_down} NVLink link(s) down")
            if s.row_remap_failed:
                problems.append(f"GPU {index}: row remapping failed")
            if level >= 2 and (s.needs_reset or s.row_remap_pending):
                problems.append(f"GPU {index}: reset required")
        if level >= 3 and self.sdc:
            problems.append("targeted stress: result mismatch (silent data corruption)")
        return problems

    def reset_gpu(self, gpu: int | None = None) -> None:
        """nvidia-smi -r: applies pending row remaps and clears reset-needing errors."""
        for s in self.gpu_state if gpu is None else [self.gpu_state[gpu]]:
            s.needs_reset = False
            s.row_remap_pending = False
            s.ecc_sbe = s.ecc_dbe = 0

    def reboot(self, duration: timedelta) -> None:
        """Power cycle: the host is gone for `duration`, then every transient fault is cleared.

        Row-remap failures and SDC stand for parts that were replaced during repair,
        which always ends in a power cycle, so they clear too. A failed NIC and a failed
        thermal interface do not: they survive a reboot until the part is replaced.
        """
        self.offline_until = self.now + duration
        self.reset_gpu()
        for s in self.gpu_state:
            s.lost = False
            s.nvlink_down = 0
            s.row_remap_failed = False
        self.sdc = False
        self.ib_fail_until = None

    def replace_parts(self) -> None:
        """Repair replaced what was broken (it ends in burn-in): NIC and thermal faults clear."""
        self.nic_failed = False
        for s in self.gpu_state:
            s.thermal_fault = False

    def _arm(self, start: datetime) -> None:
        self.start = start
        self.now = start
        if self.process is not None:
            self.next_random_fault = start + self.wall(self.process.next_gap_seconds())

    def _apply_scripted(self, fault: ScriptedFault) -> None:
        at = self.start + self.wall(fault.at)
        gpu = fault.gpu if fault.gpu is not None else 0
        state = self.gpu_state[gpu]
        if fault.fault == "cause":
            self.inject_cause(fault.cause or "", gpu=fault.gpu, at=at)
            return
        self.fault_log.append({"at": at, "fault": fault.fault, "gpu": gpu, "xid": fault.xid})
        if fault.fault == "xid":
            self.inject_xid(gpu, fault.xid or 0)
        elif fault.fault == "nvlink_down":
            state.nvlink_down += 1
        elif fault.fault in ("row_remap_pending", "row_remap_failed"):
            setattr(state, fault.fault, True)
        elif fault.fault in ("ecc_sbe", "ecc_dbe"):
            setattr(state, fault.fault, getattr(state, fault.fault) + 1)
        elif fault.fault == "ib_link":
            self.ib_fail_until = at + self.wall(fault.duration or 3600)
        elif fault.fault == "nccl_allreduce":
            self.sdc = True
        elif fault.fault == "heartbeat_loss":
            self.offline_until = at + self.wall(fault.duration or 600)
