"""Telemetry mapping from NVML readings and from `nvidia-smi -q -x`, without a GPU."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from hangar_agent.hardware.base import GPU_FIELDS
from hangar_agent.hardware.nvml import NvmlBackend, NvmlUnavailable, telemetry_from_nvml
from hangar_agent.hardware.smi_xml import parse_smi_xml

SAMPLE = Path(__file__).parent / "samples" / "nvidia-smi-q-x-h100.xml"

# Readings recorded from an H100 SXM5 (driver 550) right after an HBM3 uncorrectable error.
RECORDED = {
    "uuid": b"GPU-0d1e2f3a-4b5c-6d7e-8f9a-0b1c2d3e4f04",
    "temperature_c": 71,
    "power_mw": 653412,
    "utilization_pct": 98,
    "memory_used_bytes": 74_699_505_664,
    "ecc_corrected": 3,
    "ecc_uncorrected": 1,
    "retired_pages": [[], []],
    "remapped_rows": (0, 1, 1, 0),
    "nvlink_states": [1] * 17 + [0] + [None] * 18,
    "xids": [48, 63],
}


def test_nvml_mapping_of_recorded_values() -> None:
    gpu = telemetry_from_nvml(3, RECORDED)
    assert tuple(gpu) == GPU_FIELDS
    assert gpu == {
        "index": 3,
        "uuid": "GPU-0d1e2f3a-4b5c-6d7e-8f9a-0b1c2d3e4f04",
        "temperature_c": 71,
        "power_w": 653.4,
        "utilization_pct": 98,
        "memory_used_mb": 71239,
        "ecc_sbe": 3,
        "ecc_dbe": 1,
        "retired_pages": 0,
        "row_remap_pending": True,
        "row_remap_failed": False,
        "xid_errors": [48, 63],
        "xid_events": [{"xid": 48}, {"xid": 63}],
        "nvlink_down": 1,
        # an H100 on driver 550 exposes no recovery action field; the rest were not recorded
        "recovery_action": None,
        "throttle_reasons": None,
        "slowdown_temp_c": None,
        "nvlink_errors_1h": None,
        "energy_mj": None,
    }


def test_nvml_total_energy_is_reported_as_a_cumulative_counter() -> None:
    gpu = telemetry_from_nvml(0, {**RECORDED, "energy_mj": 123_456_789_012})
    assert gpu["energy_mj"] == 123_456_789_012


def test_nvml_mapping_of_unsupported_queries() -> None:
    gpu = telemetry_from_nvml(
        0,
        {
            "uuid": "GPU-x",
            "temperature_c": 40,
            "power_mw": None,
            "utilization_pct": None,
            "ecc_corrected": None,
            "remapped_rows": None,
            "nvlink_states": [None] * 18,
            "retired_pages": [[0x1000, 0x2000], [0x3000]],
        },
    )
    assert gpu["power_w"] is None and gpu["ecc_sbe"] == 0 and gpu["nvlink_down"] == 0
    assert gpu["retired_pages"] == 3 and gpu["row_remap_pending"] is False


class _NVMLError(Exception):
    pass


class _NotSupported(_NVMLError):
    pass


class _Timeout(_NVMLError):
    pass


def fake_pynvml(xid_events: list[tuple[int, int]]) -> SimpleNamespace:
    """A pynvml stand-in for 2 GPUs; GPU 1 has no ECC support (like a GeForce card)."""
    events = list(xid_events)

    def not_supported_on_1(value):
        def read(handle, *args):
            if handle == 1:
                raise _NotSupported("Not Supported")
            return value

        return read

    def wait(event_set, timeout_ms):
        assert timeout_ms == 0
        if not events:
            raise _Timeout("Timeout")
        index, xid = events.pop(0)
        return SimpleNamespace(device=index, eventData=xid)

    return SimpleNamespace(
        NVMLError=_NVMLError,
        NVMLError_NotSupported=_NotSupported,
        NVMLError_Timeout=_Timeout,
        NVML_VOLATILE_ECC=0,
        NVML_MEMORY_ERROR_TYPE_CORRECTED=0,
        NVML_MEMORY_ERROR_TYPE_UNCORRECTED=1,
        NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS=0,
        NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR=1,
        NVML_TEMPERATURE_GPU=0,
        NVML_NVLINK_MAX_LINKS=4,
        nvmlEventTypeXidCriticalError=8,
        nvmlInit=lambda: None,
        nvmlDeviceGetCount=lambda: 2,
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetIndex=lambda h: h,
        nvmlDeviceGetUUID=lambda h: f"GPU-{h}",
        nvmlDeviceGetTemperature=lambda h, s: 35,
        nvmlDeviceGetPowerUsage=lambda h: 75123,
        nvmlDeviceGetTotalEnergyConsumption=not_supported_on_1(9_876_543),
        nvmlDeviceGetUtilizationRates=lambda h: SimpleNamespace(gpu=0, memory=0),
        nvmlDeviceGetMemoryInfo=lambda h: SimpleNamespace(used=2 * 1024 * 1024, total=0, free=0),
        nvmlDeviceGetTotalEccErrors=not_supported_on_1(2),
        nvmlDeviceGetRetiredPages=not_supported_on_1([]),
        nvmlDeviceGetRemappedRows=not_supported_on_1((0, 0, 0, 0)),
        nvmlDeviceGetNvLinkState=lambda h, link: 1,
        nvmlEventSetCreate=lambda: "set",
        nvmlDeviceRegisterEvents=lambda h, t, s: None,
        nvmlEventSetWait=wait,
    )


def test_nvml_backend_reads_and_drains_xid_events_once() -> None:
    backend = NvmlBackend(nvml=fake_pynvml([(1, 79), (0, 13), (1, 45)]))
    first = backend.gpus()
    assert [g["xid_errors"] for g in first] == [[13], [79, 45]]
    assert first[0]["ecc_sbe"] == 2 and first[1]["ecc_sbe"] == 0
    assert first[0]["power_w"] == 75.1 and first[0]["memory_used_mb"] == 2
    assert first[0]["energy_mj"] == 9_876_543 and first[1]["energy_mj"] is None  # not supported: absent
    assert [g["xid_errors"] for g in backend.gpus()] == [[], []]


def test_nvml_unavailable_has_a_clear_message() -> None:
    def boom():
        raise _NVMLError("NVML Shared Library Not Found")

    with pytest.raises(
        NvmlUnavailable,
        match="NVML is not available on this machine: NVML Shared Library Not Found. Use --backend simulated",
    ):
        NvmlBackend(nvml=SimpleNamespace(nvmlInit=boom, NVMLError=_NVMLError))


def test_parse_recorded_nvidia_smi_xml() -> None:
    gpus = parse_smi_xml(SAMPLE.read_bytes())
    assert len(gpus) == 8
    assert all(tuple(g) == GPU_FIELDS for g in gpus)
    assert gpus[0] == {
        "index": 0,
        "uuid": "GPU-3f1c2a8e-8b4d-2c71-9e0a-5d6f7b8c9d01",
        "temperature_c": 68,
        "power_w": 652.3,
        "utilization_pct": 97,
        "memory_used_mb": 71234,
        "ecc_sbe": 0,
        "ecc_dbe": 0,
        "retired_pages": 0,
        "row_remap_pending": False,
        "row_remap_failed": False,
        "xid_errors": [],
        "xid_events": [],
        "nvlink_down": 0,
        "recovery_action": None,
        "throttle_reasons": 0,
        "slowdown_temp_c": 89,
        "nvlink_errors_1h": None,
        "energy_mj": None,
    }
    assert gpus[7]["utilization_pct"] == 0 and gpus[7]["power_w"] == 78.8
    assert gpus[2]["ecc_sbe"] == 3
    assert gpus[5]["ecc_dbe"] == 1 and gpus[5]["row_remap_pending"] is True


def test_parse_older_schema() -> None:
    xml = """<nvidia_smi_log><gpu id="00000000:07:00.0"><uuid>GPU-a</uuid>
      <temperature><gpu_temp>N/A</gpu_temp></temperature>
      <power_readings><power_draw>61.02 W</power_draw></power_readings>
      <ecc_errors><volatile><single_bit><total>4</total></single_bit>
      <double_bit><total>2</total></double_bit></volatile></ecc_errors>
      <retired_pages><multiple_single_bit_retirement><retired_count>1</retired_count>
      </multiple_single_bit_retirement><double_bit_retirement><retired_count>2</retired_count>
      </double_bit_retirement></retired_pages></gpu></nvidia_smi_log>"""
    [gpu] = parse_smi_xml(xml)
    assert gpu["temperature_c"] is None and gpu["power_w"] == 61.0
    assert (gpu["ecc_sbe"], gpu["ecc_dbe"], gpu["retired_pages"]) == (4, 2, 3)
