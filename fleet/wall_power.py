"""The node power model: what part of a node's wall draw is not its GPUs, from sourced numbers.

A node's wall draw is its GPUs' board power plus the host's share: CPUs, NVSwitches, NICs,
fans and supply losses. facility.csv derives that share per DGX model (the node's rated
maximum in generations.csv minus its GPUs at their TDP, at full load; for the H100 it is the
~575 W per GPU inside `all_in_kw_per_h100_gpu`). An estimate built from it is an upper bound
for an idle host and is always marked "estimate". Types without a sourced share (rack-scale
NVL72 trays, B300) have no estimate: they fall back to their rated maximum, marked "rated".
"""

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from functools import cache

from core.reference_data import parameter

# GPU model (generations.csv) → facility.csv row holding that model's host share at load.
# The H200 board has the H100's 700 W TDP in the same 10.2 kW chassis (generations.csv).
HOST_SHARE_ROWS = {
    "A100-SXM4-80GB": "host_kw_max_dgx_a100",
    "H100-SXM5-80GB": "host_kw_max_dgx_h100",
    "H200-SXM5-141GB": "host_kw_max_dgx_h100",
    "B200-SXM6-180GB": "host_kw_max_dgx_b200",
}


@cache
def host_share_kw() -> dict[str, Decimal]:
    """GPU model → host share (kW) at load, from facility.csv."""
    return {model: parameter(row).low for model, row in HOST_SHARE_ROWS.items()}


@dataclass(frozen=True)
class SourceMix:
    """How many nodes behind a figure are known which way, and the oldest reading used."""

    bmc: int = 0
    pdu: int = 0
    estimate: int = 0
    rated: int = 0
    oldest_reading_at: datetime | None = None

    @property
    def nodes(self) -> int:
        return self.bmc + self.pdu + self.estimate + self.rated

    @property
    def measured(self) -> int:
        return self.bmc + self.pdu

    @property
    def counts(self) -> dict[str, int]:
        return {
            k: v
            for k, v in (("bmc", self.bmc), ("pdu", self.pdu), ("estimate", self.estimate), ("rated", self.rated))
            if v
        }

    @property
    def source(self) -> str:
        """One source name when every node is known the same way, else `mixed` (never silently)."""
        counts = self.counts
        if not counts:
            return "none"
        return next(iter(counts)) if len(counts) == 1 else "mixed"

    @property
    def label(self) -> str:
        counts = self.counts
        if len(counts) <= 1:
            return self.source
        return "mixed: " + ", ".join(f"{n} {name}" for name, n in counts.items())

    def age_seconds(self, now: datetime) -> int | None:
        """Age of the oldest reading in the figure; None when nothing in it was read (all rated)."""
        if self.oldest_reading_at is None:
            return None
        return max(0, int((now - self.oldest_reading_at).total_seconds()))


HOUR = timedelta(hours=1)


def _hour_floor(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


def spread_over_hours(start: datetime, end: datetime, joules: int) -> list[tuple[datetime, int, int]]:
    """Split energy used in [start, end) evenly over the UTC hours it touches:
    [(hour start, joules, seconds)]. The parts add up to `joules` exactly (the last takes the
    rounding), so nothing is lost or made up by the split."""
    total_seconds = (end - start).total_seconds()
    if total_seconds <= 0:
        return []
    parts = []
    cursor = start
    given = 0
    while cursor < end:
        hour = _hour_floor(cursor)
        part_end = min(end, hour + HOUR)
        seconds = (part_end - cursor).total_seconds()
        share = int(round(joules * seconds / total_seconds))
        parts.append([hour, share, int(round(seconds))])
        given += share
        cursor = part_end
    parts[-1][1] += joules - given
    return [tuple(p) for p in parts]
