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

import csv
import json
import os
import re
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from random import Random
from typing import Any

from .base import blank_gpu

REFERENCE_CSV = Path(__file__).resolve().parents[2] / "core" / "reference" / "reliability.csv"
FACILITY_CSV = REFERENCE_CSV.with_name("facility.csv")

# Used only when reliability.csv cannot be found (an agent installed without the
# repository); same values as the CSV rows they are named after.
FALLBACK_RATE_PER_NODE_DAY = 0.0038
FALLBACK_CAUSE_MIX = {
    "gpu": 30.1,
    "hbm3": 17.2,
    "software": 12.9,
    "network_switch_cable": 8.4,
    "host_maintenance": 7.6,
    "sram": 4.5,
    "gpu_system_processor": 4.1,
    "nic": 1.7,
    "silent_data_corruption": 1.4,
    "gpu_thermal": 1.4,
}
GPUS_PER_NODE_OF_RATE = 8  # interruptions_per_node_day is "derived from Llama 3 figures (8 GPUs per node)"
FALLBACK_DCGM_SECONDS = {"dcgm_r1": 30.0, "dcgm_r2": 120.0, "dcgm_r3": 900.0}
# "r1 seconds" in the CSV gives no number; a readiness run takes about this long.
DCGM_R1_SECONDS = 30.0

# Per-GPU (memory MiB, idle W, busy W) by generation (generations.csv names).
PROFILES = {
    "ampere": (81920, (50, 65), (330, 400)),
    "hopper": (81559, (70, 90), (600, 700)),
    "blackwell": (183359, (120, 160), (900, 1000)),
    "blackwell-ultra": (275040, (130, 170), (1000, 1100)),
}


# The host's share of a node's draw at full load (CPUs, NVSwitches, NICs, fans, supply losses):
# facility.csv host_kw_max_* rows, read when the file is there; these are the same values.
# The share is per 8-GPU DGX; a node with fewer GPUs (an NVL72 compute tray) gets its pro rata part.
HOST_SHARE_ROWS = {
    "ampere": "host_kw_max_dgx_a100",
    "hopper": "host_kw_max_dgx_h100",
    "blackwell": "host_kw_max_dgx_b200",
}
# B300 has no facility.csv row: derived the same way, generations.csv's 14.5 kW minus 8 GPUs at
# the 1,100 W this simulator draws for them when busy.
FALLBACK_HOST_KW = {"ampere": 3.3, "hopper": 4.6, "blackwell": 6.3, "blackwell-ultra": 5.7}
# The simulator's own model of how the host part moves with load (no sourced idle figure exists):
# fans are FAN_SHARE of the host share at load and run at FAN_IDLE of that when idle; the rest of
# the host idles at HOST_IDLE of its full-load draw.
FAN_SHARE, FAN_IDLE, HOST_IDLE = 0.2, 0.3, 0.6


def load_host_share_w(generation: str, path: Path = FACILITY_CSV) -> float:
    if path.exists():
        with open(path, newline="") as fh:
            rows = {row["parameter"]: row["value"] for row in csv.DictReader(fh)}
        value = rows.get(HOST_SHARE_ROWS.get(generation, ""))
        if value:
            return float(value) * 1000
    return FALLBACK_HOST_KW[generation] * 1000


def node_wall_w(gpu_w: float, host_share_w: float, load: float) -> float:
    """A node's wall draw: its GPUs' board power, the host (CPUs, switches, NICs, supply losses)
    and fans, the last two rising with load from their idle fractions to the sourced share."""
    fans = host_share_w * FAN_SHARE * (FAN_IDLE + (1 - FAN_IDLE) * load)
    host = host_share_w * (1 - FAN_SHARE) * (HOST_IDLE + (1 - HOST_IDLE) * load)
    return gpu_w + host + fans


@dataclass(frozen=True)
class ReliabilityReference:
    rate_per_node_day: float  # as published, for an 8-GPU node
    cause_mix: dict[str, float]  # published shares as fractions, plus "other" for the rest: sums to 1
    dcgm_seconds: dict[str, float]

    @property
    def rate_per_gpu_day(self) -> float:
        return self.rate_per_node_day / GPUS_PER_NODE_OF_RATE


def load_reliability(path: str | Path | None = None) -> ReliabilityReference:
    """Read failure rate, cause mix and DCGM durations from reliability.csv (fallback if absent)."""
    source = Path(path) if path is not None else REFERENCE_CSV
    if path is None and not source.exists():
        return _reference(FALLBACK_RATE_PER_NODE_DAY, FALLBACK_CAUSE_MIX, FALLBACK_DCGM_SECONDS)
    with open(source, newline="") as fh:
        rows = {row["parameter"]: row["value"] for row in csv.DictReader(fh)}
    mix = {
        name.removeprefix("llama3_cause_"): float(value)
        for name, value in rows.items()
        if name.startswith("llama3_cause_")
    }
    if not mix or "interruptions_per_node_day" not in rows:
        raise ValueError(f"{source} lacks llama3_cause_* or interruptions_per_node_day rows")
    return _reference(
        float(rows["interruptions_per_node_day"]), mix, parse_dcgm_levels(rows.get("dcgm_diag_levels", ""))
    )


def parse_dcgm_levels(text: str) -> dict[str, float]:
    """'r1 seconds (...); r2 ~2 min (...); r3 ~15 min; ...' -> {"dcgm_r1": 30, "dcgm_r2": 120, ...}."""
    seconds = dict(FALLBACK_DCGM_SECONDS)
    units = {"s": 1, "sec": 1, "second": 1, "seconds": 1, "min": 60, "minutes": 60, "h": 3600}
    for level, number, unit in re.findall(r"r(\d)\s+~?(\d+(?:\.\d+)?)?\s*([a-z]+)", text):
        if unit not in units:
            continue
        seconds[f"dcgm_r{level}"] = float(number) * units[unit] if number else DCGM_R1_SECONDS
    return seconds


def _reference(rate: float, mix: dict[str, float], dcgm: dict[str, float]) -> ReliabilityReference:
    """Shares stay as published (percent of unexpected interruptions); what the table does not
    name is "other", so the simulated mix matches the source instead of inflating every cause."""
    listed = sum(mix.values())
    if listed > 100.0 + 1e-9:
        raise ValueError(f"the cause mix sums to {listed}%, more than 100%")
    shares = {k: v / 100.0 for k, v in mix.items()}
    if listed < 100.0:
        shares["other"] = (100.0 - listed) / 100.0
    return ReliabilityReference(rate, shares, dcgm)


class FaultProcess:
    """Draws fault arrivals (exponential gaps) and causes (weighted) for one node of `gpu_count`
    GPUs: the rate is per GPU."""

    def __init__(self, rng: Random, reference: ReliabilityReference, gpu_count: int = GPUS_PER_NODE_OF_RATE) -> None:
        self.rng = rng
        self.rate_per_second = reference.rate_per_gpu_day * gpu_count / 86400.0
        self.causes = list(reference.cause_mix)
        self.weights = [reference.cause_mix[c] for c in self.causes]

    def next_gap_seconds(self) -> float:
        """Simulated seconds until the next interruption."""
        return self.rng.expovariate(self.rate_per_second)

    def cause(self) -> str:
        return self.rng.choices(self.causes, self.weights)[0]


# ---- scripted scenarios -------------------------------------------------------------

FAULT_KINDS = (
    "xid",
    "cause",
    "nvlink_down",
    "row_remap_pending",
    "row_remap_failed",
    "ecc_sbe",
    "ecc_dbe",
    "ib_link",
    "nccl_allreduce",
    "heartbeat_loss",
)
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclass(frozen=True)
class ScriptedFault:
    """One injected fault; `at` and `duration` in simulated seconds from the start."""

    at: float
    fault: str
    node: str | None = None
    gpu: int | None = None
    xid: int | None = None
    cause: str | None = None
    duration: float | None = None


def parse_duration(text: str) -> float:
    """'30s', '5m', '1.5h', '2d' or a bare number of seconds."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([smhd]?)", text.strip())
    if not match:
        raise ValueError(f"bad duration {text!r} (use e.g. 30s, 5m, 1h)")
    return float(match[1]) * _UNITS.get(match[2] or "s", 1)


def parse_scenario(spec: str | list[dict[str, Any]]) -> list[ScriptedFault]:
    """Parse a scenario, sorted by time.

    Either a list of dicts ({"at": 30, "node": "host-001", "fault": "xid", "xid": 79, "gpu": 3})
    or text, one fault per line or ';'-separated, '#' comments:
        xid 79 on gpu 3 at 30s
        cause hbm3 on gpu 1 on host-002 at 5m
        ib_link fail at 90s
        heartbeat_loss for 10m at 1h
    """
    items = (
        spec
        if isinstance(spec, list)
        else [_parse_line(line) for line in re.split(r"[;\n]", spec) if line.split("#")[0].strip()]
    )
    return sorted((_fault(item) for item in items), key=lambda f: f.at)


def _parse_line(line: str) -> dict[str, Any]:
    words = line.split("#")[0].lower().split()
    item: dict[str, Any] = {"fault": words[0]}
    rest = words[1:]
    if words[0] in ("xid", "cause"):
        if not rest:
            raise ValueError(f"{line!r}: '{words[0]}' needs a value")
        item[words[0]] = rest.pop(0)
    if rest and rest[0] == "fail":
        rest.pop(0)
    while rest:
        word = rest.pop(0)
        if word == "on" and rest[:1] == ["gpu"] and len(rest) > 1:
            item["gpu"] = rest[1]
            del rest[:2]
        elif word == "on" and rest[:1] == ["node"] and len(rest) > 1:
            item["node"] = rest[1]
            del rest[:2]
        elif word == "on" and rest:
            item["node"] = rest.pop(0)
        elif word in ("at", "for") and rest:
            item["at" if word == "at" else "duration"] = parse_duration(rest.pop(0))
        else:
            raise ValueError(f"cannot parse scenario line {line!r} at {word!r}")
    return item


def _fault(item: dict[str, Any]) -> ScriptedFault:
    kind = str(item.get("fault", ""))
    if kind not in FAULT_KINDS:
        raise ValueError(f"unknown fault {kind!r}; known: {', '.join(FAULT_KINDS)}")
    if "at" not in item:
        raise ValueError(f"fault {item!r} has no 'at'")
    if kind == "xid" and item.get("xid") is None:
        raise ValueError(f"fault {item!r} needs an 'xid'")
    if kind == "cause" and item.get("cause") not in FALLBACK_CAUSE_MIX:
        raise ValueError(f"fault {item!r} needs a 'cause' among {', '.join(FALLBACK_CAUSE_MIX)}")
    at = item["at"]
    return ScriptedFault(
        at=parse_duration(at) if isinstance(at, str) else float(at),
        fault=kind,
        node=item.get("node"),
        gpu=int(item["gpu"]) if item.get("gpu") is not None else None,
        xid=int(item["xid"]) if item.get("xid") is not None else None,
        cause=item.get("cause"),
        duration=float(item["duration"]) if item.get("duration") is not None else None,
    )


# ---- the simulated node ----------------------------------------------------------------


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
                nvlink_down=state.nvlink_down,
                throttle_reasons=0x40 if state.thermal_fault else 0,
                energy_mj=int(self.gpu_energy_mj[index]),
            )
            if state.thermal_fault:
                gpu["temperature_c"] = self.rng.randint(90, 95)
            state.xids = []
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

    def inject_xid(self, gpu: int, xid: int) -> None:
        """Record the XID event and its lasting side effects on the GPU."""
        state = self.gpu_state[gpu]
        state.xids.append(xid)
        if xid == 79:
            state.lost = True
        elif xid == 74:
            state.nvlink_down = max(state.nvlink_down, self.rng.randint(1, 2))
        elif xid == 48:
            state.ecc_dbe += 1
            state.row_remap_pending = True
            state.xids.append(63)
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
