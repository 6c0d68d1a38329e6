"""Xid detail from kernel-log lines (the shapes NVIDIA's Xid catalogue documents), merged with
NVML's Xid events, and sent in the heartbeat as `xid_events`."""

from pathlib import Path
from types import SimpleNamespace

from test_hardware import fake_pynvml

from hangar_agent.hardware.nvml import NvmlBackend
from hangar_agent.hardware.xid_log import merge_events, normalise_pci, parse_xid_line

LINES = (Path(__file__).parent / "samples" / "kmsg-xid-lines.txt").read_text().splitlines()


def test_recorded_lines_decode_to_the_fields_the_catalogue_reads():
    parsed = [parse_xid_line(line) for line in LINES]
    assert parsed == [
        ("0000:b3:00", {"xid": 154, "recovery_action": 1}),
        ("0000:b3:00", {"xid": 94}),
        ("0008:06:00", {"xid": 145, "unit": "RLW_REMAP", "intr_info": 4, "error_status": 1}),
        ("0000:0a:00", {"xid": 74, "registers": [0, 0, 0x10000, 0, 0, 0, 0]}),
        ("0000:b3:00", {"xid": 154, "recovery_action": 0}),
        None,
    ]


def test_a_garbled_line_decodes_to_the_bare_xid_never_a_guess():
    assert parse_xid_line("NVRM: Xid (PCI:0000:b3:00): 154, GPU recovery action changed somehow") == (
        "0000:b3:00",
        {"xid": 154},
    )
    assert parse_xid_line("NVRM: Xid (PCI:0000:b3:00): 145, rlw (0xzz)") == ("0000:b3:00", {"xid": 145})
    assert parse_xid_line("NVRM: Xid (PCI:0000:b3:00): 999999, x") is None


def test_pci_ids_from_nvml_and_the_kernel_log_meet():
    assert normalise_pci("00000000:B3:00.0") == normalise_pci("0000:b3:00") == "0000:b3:00"


def test_merge_gives_each_nvml_xid_its_logged_detail_and_keeps_logged_extras():
    logged = [{"xid": 154, "recovery_action": 1}, {"xid": 94}]
    assert merge_events([94, 13], logged) == [{"xid": 94}, {"xid": 13}, {"xid": 154, "recovery_action": 1}]


class _Log:
    def __init__(self, found):
        self.found = found

    def read(self):
        found, self.found = self.found, {}
        return found


def test_the_nvml_backend_sends_xid_events_with_kernel_log_detail_and_the_driver():
    nvml = fake_pynvml([(1, 62)])
    nvml.nvmlDeviceGetPciInfo = lambda h: SimpleNamespace(busId=b"00000000:B3:00.0" if h == 1 else b"0000:18:00.0")
    nvml.nvmlSystemGetDriverVersion = lambda: b"575.57.08"
    nvml.nvmlDeviceGetArchitecture = lambda h: 9
    log = _Log({"0000:b3:00": [parse_xid_line(LINES[0])[1]]})
    backend = NvmlBackend(nvml=nvml, kernel_log=log)
    gpus = backend.gpus()
    assert gpus[1]["xid_events"] == [{"xid": 62}, {"xid": 154, "recovery_action": 1}]
    assert gpus[0]["xid_events"] == []
    assert backend.driver() == {"driver_version": "575.57.08", "gpu_architecture": "hopper"}
