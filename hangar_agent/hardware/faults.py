"""Faults of the simulated node: the Poisson process at the reference rate, and scripted faults
("xid 79 on gpu 3 at 20s") parsed from a scenario."""

from __future__ import annotations

import re
from dataclasses import dataclass
from random import Random
from typing import Any

from .reference import FALLBACK_CAUSE_MIX, GPUS_PER_NODE_OF_RATE, ReliabilityReference


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
