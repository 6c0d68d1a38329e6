"""Xid detail from the kernel log: what NVML's Xid event does not carry.

NVML's event gives the Xid number only. The driver's kernel-log line for the same Xid carries
what NVIDIA's Xid catalogue decodes (NVIDIA, "Analyzing Xid Errors with the Xid Catalog"):

    NVRM: Xid (PCI:0000:b3:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)
    NVRM: Xid (PCI:0008:06:00): 145, RLW_REMAP Nonfatal XC0 i0 Link 01 (0x00000004 0x00000001 0x00000000 ...)
    NVRM: Xid (PCI:0000:0a:00): 74, pid=1234, name=python, NVLink: fatal error detected on link 4(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)

`parse_xid_line` turns one line into (PCI bus id, event) where the event holds only the fields
the control plane accepts: `recovery_action` (154), `unit`, `intr_info`, `error_status`
(144-150: the first two words in the parentheses, in both the pre-R575 and R575+ layouts;
the bitfields inside intrInfo are not decoded here) and `registers` (74: up to seven).
Pure functions: tests feed recorded lines; `KernelLog` reads /dev/kmsg where it is readable.
"""

from __future__ import annotations

import errno
import logging
import os
import re
from typing import Any

log = logging.getLogger(__name__)

_LINE = re.compile(r"NVRM: Xid \(PCI:(?P<pci>[0-9a-fA-F:.]+)\): (?P<xid>\d{1,5}),\s*(?P<rest>.*)$")
_RECOVERY = re.compile(r"recovery action changed from 0x[0-9a-fA-F]+ \([^)]*\) to 0x(?P<to>[0-9a-fA-F]+)")
_RECOVERY_NAMES = {
    "none": 0,
    "gpu reset required": 1,
    "node reboot required": 2,
    "drain p2p": 3,
    "drain and reset": 4,
}
_RECOVERY_NAME = re.compile(r"recovery action changed from .*? to (?:0x[0-9a-fA-F]+ )?\((?P<name>[^)]*)\)")
_UNIT = re.compile(r"^(?P<unit>[A-Z][A-Z0-9_]{0,31})\b")
_HEX = re.compile(r"0x([0-9a-fA-F]{1,8})\b")
MAX_REGISTER = 2**32 - 1


def normalise_pci(bus_id: str) -> str:
    """'00000000:B3:00.0' (NVML) and '0000:b3:00' (kernel log) → '0000:b3:00'."""
    parts = bus_id.lower().split(":")
    if len(parts) < 3:
        return bus_id.lower()
    domain, bus, device = parts[-3], parts[-2], parts[-1].split(".")[0]
    return f"{int(domain, 16):04x}:{bus}:{device}"


def parse_xid_line(line: str) -> tuple[str, dict[str, Any]] | None:
    """(PCI bus id, {xid, and the fields its catalogue row decodes}) or None for other lines."""
    match = _LINE.search(line)
    if not match:
        return None
    number = int(match["xid"])
    if not 0 < number < 100_000:
        return None
    rest = match["rest"]
    event: dict[str, Any] = {"xid": number}
    if number == 154:
        action = _RECOVERY.search(rest)
        value = int(action["to"], 16) if action else None
        if value is None:
            named = _RECOVERY_NAME.search(rest)
            value = _RECOVERY_NAMES.get(named["name"].strip().lower()) if named else None
        if value is not None and 0 <= value <= 4:
            event["recovery_action"] = value
    elif 144 <= number <= 150:
        unit = _UNIT.match(rest)
        if unit:
            event["unit"] = unit["unit"]
        words = _parenthesised_hex(rest)
        if len(words) >= 2:
            event["intr_info"], event["error_status"] = words[0], words[1]
    elif number == 74:
        words = _parenthesised_hex(rest)
        if words:
            event["registers"] = words[:7]
    return normalise_pci(match["pci"]), event


def _parenthesised_hex(text: str) -> list[int]:
    start = text.rfind("(")
    if start < 0:
        return []
    values = [int(h, 16) for h in _HEX.findall(text[start:])]
    return [v for v in values if v <= MAX_REGISTER]


class KernelLog:
    """Xid lines from /dev/kmsg, read without blocking; empty where the log is not readable."""

    def __init__(self, path: str = "/dev/kmsg") -> None:
        self.fd: int | None = None
        try:
            self.fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
            os.lseek(self.fd, 0, os.SEEK_END)  # only what happens from now on
        except OSError as exc:
            log.info("kernel log %s not readable (%s): Xid events carry no detail", path, exc)
            self.fd = None

    def read(self) -> dict[str, list[dict[str, Any]]]:
        """{PCI bus id: [events]} logged since the last read."""
        found: dict[str, list[dict[str, Any]]] = {}
        if self.fd is None:
            return found
        while True:
            try:
                record = os.read(self.fd, 8192)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # the ring buffer overwrote unread records
                    continue
                log.warning("reading the kernel log failed: %s", exc)
                break
            if not record:
                break
            parsed = parse_xid_line(record.decode("utf-8", "replace"))
            if parsed:
                found.setdefault(parsed[0], []).append(parsed[1])
        return found


def merge_events(xids: list[int], logged: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One event per NVML Xid, with the detail of the first unused kernel-log line of the same
    Xid; logged Xids NVML did not report (154 is not an NVML critical event on every driver)
    are kept too."""
    pool = list(logged)
    events = []
    for number in xids:
        match = next((e for e in pool if e["xid"] == number), None)
        if match is not None:
            pool.remove(match)
        events.append(match or {"xid": number})
    return events + pool
