"""Real GPUs through NVML (nvidia-ml-py's `pynvml`).

Reading and mapping are split: `NvmlBackend` only calls NVML and collects raw
values (None where the GPU does not support a query); `telemetry_from_nvml` is a
pure function from those raw values to the heartbeat shape, testable without a GPU.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime
from types import ModuleType
from typing import Any

from .base import CounterWindow, blank_gpu, ib_link_checks, ib_ports, nvme_drives
from .xid_log import KernelLog, merge_events, normalise_pci

log = logging.getLogger(__name__)

NVLINK_ACTIVE = 1
# nvmlDeviceGetArchitecture → the heartbeat's gpu_architecture (NVML_DEVICE_ARCH_*)
ARCHITECTURES = {7: "ampere", 9: "hopper", 10: "blackwell"}


class NvmlUnavailable(RuntimeError):
    """NVML cannot be used here (no library, no driver, no GPU)."""


def telemetry_from_nvml(index: int, raw: dict[str, Any]) -> dict[str, Any]:
    """Map raw NVML readings to one heartbeat `gpus[]` entry.

    raw keys: uuid (str|bytes), temperature_c, power_mw, energy_mj (total energy since the driver
    loaded), utilization_pct,
    memory_used_bytes, ecc_corrected, ecc_uncorrected (volatile totals),
    retired_pages (list of page lists or a count), remapped_rows
    ((corrected, uncorrected, pending, failure) or None), nvlink_states (per link:
    1 active, 0 inactive, None not present) and xids (XIDs since the last read).
    """
    uuid = raw.get("uuid") or ""
    gpu = blank_gpu(index, uuid.decode() if isinstance(uuid, bytes) else str(uuid))
    if raw.get("temperature_c") is not None:
        gpu["temperature_c"] = int(raw["temperature_c"])
    if raw.get("power_mw") is not None:
        gpu["power_w"] = round(raw["power_mw"] / 1000.0, 1)
    if raw.get("energy_mj") is not None:
        gpu["energy_mj"] = int(raw["energy_mj"])  # cumulative since the driver loaded
    if raw.get("utilization_pct") is not None:
        gpu["utilization_pct"] = int(raw["utilization_pct"])
    if raw.get("memory_used_bytes") is not None:
        gpu["memory_used_mb"] = int(raw["memory_used_bytes"]) // (1024 * 1024)
    gpu["ecc_sbe"] = int(raw.get("ecc_corrected") or 0)
    gpu["ecc_dbe"] = int(raw.get("ecc_uncorrected") or 0)
    retired = raw.get("retired_pages") or 0
    gpu["retired_pages"] = retired if isinstance(retired, int) else sum(len(p) for p in retired)
    rows = raw.get("remapped_rows")
    if rows is not None:
        gpu["row_remap_pending"] = bool(rows[2])
        gpu["row_remap_failed"] = bool(rows[3])
    states = raw.get("nvlink_states") or []
    gpu["nvlink_down"] = sum(1 for s in states if s is not None and s != NVLINK_ACTIVE)
    gpu["xid_errors"] = [int(x) for x in raw.get("xids") or []]
    gpu["xid_events"] = merge_events(gpu["xid_errors"], raw.get("xid_log") or [])
    # Blackwell and later: what NVIDIA says to do about the last uncorrectable fault (0 none ...
    # 5 recover IMEX domain); absent on GPUs and drivers that do not expose the field.
    if raw.get("recovery_action") is not None:
        gpu["recovery_action"] = int(raw["recovery_action"])
    if raw.get("throttle_reasons") is not None:
        gpu["throttle_reasons"] = int(raw["throttle_reasons"])
    if raw.get("slowdown_temp_c") is not None:
        gpu["slowdown_temp_c"] = int(raw["slowdown_temp_c"])
    if raw.get("nvlink_errors_1h") is not None:
        gpu["nvlink_errors_1h"] = int(raw["nvlink_errors_1h"])
    return gpu


NVLINK_ERROR_FIELDS = (
    "NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
    "NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
    "NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
    "NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
)


class NvmlBackend:
    """Telemetry from the local GPUs; XIDs come from an NVML event set polled without waiting."""

    def __init__(self, nvml: ModuleType | None = None, kernel_log: Any = None) -> None:
        """`nvml` defaults to the real `pynvml`; tests pass a stand-in module."""
        try:
            if nvml is None:
                import pynvml as nvml
            nvml.nvmlInit()
            self.nvml = nvml
            self.handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
        except ImportError as exc:
            raise NvmlUnavailable(_unavailable(f"nvidia-ml-py is not installed ({exc})")) from exc
        except Exception as exc:  # pynvml raises NVMLError subclasses built at runtime
            raise NvmlUnavailable(_unavailable(str(exc) or type(exc).__name__)) from exc
        self._pending_xids: dict[int, list[int]] = {}
        self.event_set = self._register_xid_events()
        self.kernel_log = kernel_log if kernel_log is not None else KernelLog()
        self.pci = [self._pci(h) for h in self.handles]  # kernel-log lines name the GPU by bus id
        self.counters = CounterWindow(3600.0)  # NVLink errors and IB link downs over the last hour

    def advance(self, now: datetime, *, allocated: bool) -> None:
        """Real hardware keeps its own time."""

    def power_state(self) -> str:
        return "on"

    def wall_power(self) -> dict[str, Any] | None:
        """NVML sees only the GPUs; the node's wall draw comes from its BMC (not read here yet)."""
        return None

    def drives(self) -> list[dict[str, Any]]:
        return nvme_drives()

    def ib_ports(self) -> list[dict[str, Any]]:
        return ib_ports(window=self.counters, now=time.monotonic())

    def health_checks(self) -> list[dict[str, Any]]:
        return ib_link_checks()

    def _pci(self, handle: Any) -> str:
        info = self._optional("nvmlDeviceGetPciInfo", handle)
        bus_id = getattr(info, "busId", None) if info is not None else None
        return normalise_pci(_text(bus_id)) if bus_id else ""

    def driver(self) -> dict[str, Any]:
        """The driver version and GPU architecture the control plane decodes Xids by."""
        found: dict[str, Any] = {}
        version = self._optional("nvmlSystemGetDriverVersion")
        if version is not None:
            found["driver_version"] = _text(version)
        if self.handles:
            arch = ARCHITECTURES.get(self._optional("nvmlDeviceGetArchitecture", self.handles[0]))
            if arch:
                found["gpu_architecture"] = arch
        return found

    def gpus(self) -> list[dict[str, Any]]:
        self._drain_xid_events()
        logged = self.kernel_log.read()
        result = []
        for index, handle in enumerate(self.handles):
            raw = self._read(handle)
            raw["xids"] = self._pending_xids.pop(index, [])
            raw["xid_log"] = logged.get(self.pci[index], []) if index < len(self.pci) else []
            if raw.get("nvlink_error_total") is not None:
                raw["nvlink_errors_1h"] = self.counters.increase(
                    f"gpu{index}:nvlink", time.monotonic(), raw["nvlink_error_total"]
                )
            result.append(telemetry_from_nvml(index, raw))
        return result

    def _read(self, handle: Any) -> dict[str, Any]:
        n = self.nvml
        util = self._maybe(n.nvmlDeviceGetUtilizationRates, handle)
        memory = self._maybe(n.nvmlDeviceGetMemoryInfo, handle)
        ecc = [
            self._maybe(n.nvmlDeviceGetTotalEccErrors, handle, kind, n.NVML_VOLATILE_ECC)
            for kind in (n.NVML_MEMORY_ERROR_TYPE_CORRECTED, n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED)
        ]
        retired = [
            self._maybe(n.nvmlDeviceGetRetiredPages, handle, cause) or []
            for cause in (
                n.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
                n.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR,
            )
        ]
        return {
            "uuid": self._maybe(n.nvmlDeviceGetUUID, handle),
            "temperature_c": self._maybe(n.nvmlDeviceGetTemperature, handle, n.NVML_TEMPERATURE_GPU),
            "power_mw": self._maybe(n.nvmlDeviceGetPowerUsage, handle),
            "energy_mj": self._maybe(n.nvmlDeviceGetTotalEnergyConsumption, handle),
            "utilization_pct": util.gpu if util is not None else None,
            "memory_used_bytes": memory.used if memory is not None else None,
            "ecc_corrected": ecc[0],
            "ecc_uncorrected": ecc[1],
            "retired_pages": retired,
            "remapped_rows": self._maybe(n.nvmlDeviceGetRemappedRows, handle),
            "nvlink_states": [
                self._maybe(n.nvmlDeviceGetNvLinkState, handle, link) for link in range(n.NVML_NVLINK_MAX_LINKS)
            ],
            "recovery_action": self._field(handle, getattr(n, "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION", None)),
            "throttle_reasons": self._optional("nvmlDeviceGetCurrentClocksEventReasons", handle)
            if hasattr(n, "nvmlDeviceGetCurrentClocksEventReasons")
            else self._optional("nvmlDeviceGetCurrentClocksThrottleReasons", handle),
            "slowdown_temp_c": self._optional(
                "nvmlDeviceGetTemperatureThreshold", handle, getattr(n, "NVML_TEMPERATURE_THRESHOLD_SLOWDOWN", 1)
            ),
            "nvlink_error_total": self._nvlink_errors(handle),
        }

    def _optional(self, name: str, *args: Any) -> Any:
        """A query older pynvml releases (or stand-ins) lack reads as None."""
        fn = getattr(self.nvml, name, None)
        return None if fn is None else self._maybe(fn, *args)

    def _field(self, handle: Any, field_id: int | None) -> int | None:
        """One NVML field value (None where this GPU or driver does not expose it)."""
        if field_id is None or not hasattr(self.nvml, "nvmlDeviceGetFieldValues"):
            return None
        values = self._maybe(self.nvml.nvmlDeviceGetFieldValues, handle, [field_id])
        if not values or getattr(values[0], "nvmlReturn", 1) != 0:
            return None
        value = values[0].value
        return int(getattr(value, "ullVal", 0) or getattr(value, "uiVal", 0))

    def _nvlink_errors(self, handle: Any) -> int | None:
        readings = [self._field(handle, getattr(self.nvml, name, None)) for name in NVLINK_ERROR_FIELDS]
        present = [r for r in readings if r is not None]
        return sum(present) if present else None

    def _maybe(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Call NVML; a query this GPU does not support (or an absent link) reads as None."""
        try:
            return fn(*args)
        except self.nvml.NVMLError as exc:
            if not isinstance(exc, self._soft_errors()):
                log.warning("%s failed: %s", getattr(fn, "__name__", fn), exc)
            return None

    def _soft_errors(self) -> tuple[type[Exception], ...]:
        n = self.nvml
        return tuple(
            getattr(n, name)
            for name in ("NVMLError_NotSupported", "NVMLError_InvalidArgument", "NVMLError_NotFound")
            if hasattr(n, name)
        )

    def _register_xid_events(self) -> Any:
        n = self.nvml
        try:
            event_set = n.nvmlEventSetCreate()
        except n.NVMLError as exc:
            log.warning("XID events unavailable (%s); heartbeats will carry no xid_errors", exc)
            return None
        for index, handle in enumerate(self.handles):
            try:
                n.nvmlDeviceRegisterEvents(handle, n.nvmlEventTypeXidCriticalError, event_set)
            except n.NVMLError as exc:
                log.warning("GPU %d: cannot register for XID events: %s", index, exc)
        return event_set

    def _drain_xid_events(self) -> None:
        if self.event_set is None:
            return
        n = self.nvml
        while True:
            try:
                event = n.nvmlEventSetWait(self.event_set, 0)
            except n.NVMLError_Timeout:
                return
            except n.NVMLError as exc:
                log.warning("reading XID events failed: %s", exc)
                return
            try:
                index = n.nvmlDeviceGetIndex(event.device)
            except n.NVMLError:
                continue
            self._pending_xids.setdefault(index, []).append(int(event.eventData))


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _unavailable(reason: str) -> str:
    return (
        f"NVML is not available on this machine: {reason}. "
        "Use --backend simulated to run without GPUs, or install the NVIDIA driver."
    )
