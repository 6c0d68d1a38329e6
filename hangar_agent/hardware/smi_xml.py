"""Parse `nvidia-smi -q -x` into heartbeat GPU entries.

A fallback and a cross-check for NVML: the XML is what operators already collect
in bug reports. It carries no NVLink state and no XID events (those come from
`nvidia-smi nvlink -s` and the kernel log), so nvlink_down is 0 and xid_errors [].
Handles both the current ECC layout (sram_*/dram_* counters, driver >= 535) and
the older single_bit/double_bit one, and both <gpu_power_readings> and the older
<power_readings>.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

from .base import blank_gpu


def parse_smi_xml(text: str | bytes) -> list[dict[str, Any]]:
    """Telemetry for every <gpu> in document order (nvidia-smi orders by PCI bus id, like NVML)."""
    root = ET.fromstring(text)
    return [_gpu(index, node) for index, node in enumerate(root.findall("gpu"))]


def _gpu(index: int, node: ET.Element) -> dict[str, Any]:
    gpu = blank_gpu(index, _text(node, "uuid") or "")
    gpu["temperature_c"] = _int(_text(node, "temperature/gpu_temp"))
    power = _number(
        _text(node, "gpu_power_readings/power_draw")
        or _text(node, "gpu_power_readings/instant_power_draw")
        or _text(node, "power_readings/power_draw")
    )
    gpu["power_w"] = round(power, 1) if power is not None else None
    gpu["utilization_pct"] = _int(_text(node, "utilization/gpu_util"))
    gpu["memory_used_mb"] = _int(_text(node, "fb_memory_usage/used"))
    gpu["ecc_sbe"], gpu["ecc_dbe"] = _ecc(node.find("ecc_errors/volatile"))
    gpu["retired_pages"] = sum(
        _int(_text(node, f"retired_pages/{kind}/retired_count")) or 0
        for kind in ("multiple_single_bit_retirement", "double_bit_retirement")
    )
    gpu["row_remap_pending"] = _yes(_text(node, "remapped_rows/remapped_row_pending"))
    gpu["row_remap_failed"] = _yes(_text(node, "remapped_rows/remapped_row_failure"))
    gpu["slowdown_temp_c"] = _int(_text(node, "temperature/gpu_temp_slow_threshold"))
    reasons = 0
    for schema in ("clocks_event_reasons/clocks_event_reason", "clocks_throttle_reasons/clocks_throttle_reason"):
        for suffix, bit in (("sw_thermal_slowdown", 0x20), ("hw_thermal_slowdown", 0x40)):
            if (_text(node, f"{schema}_{suffix}") or "").strip() == "Active":
                reasons |= bit
    gpu["throttle_reasons"] = reasons
    return gpu


def _ecc(volatile: ET.Element | None) -> tuple[int, int]:
    """(correctable, uncorrectable) volatile totals in either schema; N/A counts as 0."""
    if volatile is None:
        return 0, 0
    if volatile.find("single_bit") is not None:
        return (_int(_text(volatile, "single_bit/total")) or 0, _int(_text(volatile, "double_bit/total")) or 0)
    sbe = dbe = 0
    for child in volatile:
        value = _int(child.text) or 0
        if "_uncorrectable" in child.tag:
            dbe += value
        elif child.tag.endswith("_correctable"):
            sbe += value
    return sbe, dbe


def _text(node: ET.Element, path: str) -> str | None:
    found = node.find(path)
    if found is None or found.text is None:
        return None
    return found.text.strip()


def _number(value: str | None) -> float | None:
    """'69.89 W' -> 69.89; 'N/A', '[N/A]', 'Not Supported' -> None."""
    if not value:
        return None
    try:
        return float(value.split()[0])
    except ValueError:
        return None


def _int(value: str | None) -> int | None:
    number = _number(value)
    return int(number) if number is not None else None


def _yes(value: str | None) -> bool:
    return (value or "").strip().lower() == "yes"
