"""The reference figures the simulated node draws from: fault rates and the cause mix
(core/reference/reliability.csv), DCGM durations, and the host's share of wall power
(core/reference/facility.csv), each with the fallback used when the file is absent."""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from pathlib import Path

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
