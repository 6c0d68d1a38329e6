"""The agent's drive tools: identify capabilities, the counter window, and the erase
verification that samples the whole device (start, end and random offsets)."""

from __future__ import annotations

from pathlib import Path
from random import Random

from hangar_agent.executors import CommandResult, _sanitize_commands, _sanitize_finish
from hangar_agent.hardware.base import CounterWindow, ib_ports, nvme_capabilities, nvme_drives
from hangar_agent.verify_erase import BLOCK, sample_offsets, verify

SIZE = 8 * 1024 * 1024  # 8 MiB = 128 blocks of 64 KiB


def test_offsets_cover_start_end_and_the_whole_device() -> None:
    offsets = sample_offsets(SIZE, rng=Random(1), samples=16)
    assert offsets[0] == 0 and offsets[-1] == SIZE - BLOCK and len(offsets) == 16
    assert all(o % BLOCK == 0 for o in offsets)
    assert any(o < SIZE / 4 for o in offsets[1:]) and any(SIZE / 4 < o < SIZE - BLOCK for o in offsets)
    assert sample_offsets(SIZE, rng=Random(1), samples=16) == offsets  # the recorded seed reproduces them
    assert sample_offsets(BLOCK * 3, rng=Random(1), samples=64) == [0, BLOCK, 2 * BLOCK]


def test_verify_catches_data_left_beyond_the_first_mib(tmp_path: Path) -> None:
    device = tmp_path / "nvme0n1"
    device.write_bytes(bytes(SIZE))
    assert verify(str(device), seed=5)["all_zero"] is True
    with open(device, "r+b") as fh:  # an erase that skipped the end of the device
        fh.seek(SIZE - 100)
        fh.write(b"tenant data")
    report = verify(str(device), seed=5)
    assert report["all_zero"] is False and report["nonzero_offsets"] == [SIZE - BLOCK]


def test_the_sanitize_executor_verifies_with_sampled_reads() -> None:
    params = {"device": "/dev/nvme0n1", "serial": "S1", "method": "purge"}
    erase, check = _sanitize_commands(params)
    assert erase[:2] == ["nvme", "format"] and "hangar_agent.verify_erase" in check
    assert check[check.index("--seed") + 1] == str(params["verify_seed"])
    finish = _sanitize_finish(params)
    ok = '{"all_zero": true, "samples": 64, "nonzero": 0}'
    bad = '{"all_zero": false, "samples": 64, "nonzero": 3}'
    passed = finish([CommandResult(tuple(erase), 0, "ok", ""), CommandResult(tuple(check), 0, ok, "")])
    assert passed["status"] == "succeeded" and passed["output"]["sanitization_record"]["verified"] is True
    assert '"samples": 64' in passed["output"]["sanitization_record"]["evidence"]
    failed = finish([CommandResult(tuple(erase), 0, "ok", ""), CommandResult(tuple(check), 1, bad, "")])
    assert failed["status"] == "failed" and failed["output"]["sanitization_record"]["verified"] is False


def test_identify_data_gives_sed_and_purge_capability(tmp_path: Path) -> None:
    assert nvme_capabilities({"fna": 0x4, "sanicap": 0}) == (True, True)  # crypto erase by format
    assert nvme_capabilities({"fna": 0, "sanicap": 0x2}) == (False, True)  # block erase sanitize
    assert nvme_capabilities({}) == (False, False)  # destroy is the only way out
    namespace = tmp_path / "nvme0n1"
    (namespace / "device").mkdir(parents=True)
    (namespace / "size").write_text("7501476528\n")
    (namespace / "device" / "serial").write_text("S6XNNA0T\n")
    (namespace / "device" / "model").write_text("SAMSUNG MZQL23T8HCLS\n")
    drives = nvme_drives(tmp_path, id_ctrl=lambda device: {"fna": 0x4, "sanicap": 0x3})
    assert drives == [
        {
            "device": "/dev/nvme0n1",
            "serial": "S6XNNA0T",
            "model": "SAMSUNG MZQL23T8HCLS",
            "capacity_gb": 3840,
            "self_encrypting": True,
            "purge_supported": True,
        }
    ]


def test_link_counters_count_flaps_between_samples_over_the_window(tmp_path: Path) -> None:
    port = tmp_path / "mlx5_0" / "ports" / "1"
    (port / "counters").mkdir(parents=True)
    (port / "state").write_text("4: ACTIVE\n")
    window = CounterWindow(3600)
    for t, downs in ((0, 10), (600, 12), (1200, 14)):
        (port / "counters" / "link_downed").write_text(f"{downs}\n")
        (port / "counters" / "symbol_error").write_text("0\n")
        ports = ib_ports(tmp_path, window=window, now=t)
    assert ports == [{"port": "mlx5_0/1", "state": "4: ACTIVE", "link_downed_1h": 4, "symbol_errors_1h": 0}]
    assert window.increase("x", 0, 5) == 0 and window.increase("x", 4000, 9) == 4
    assert window.increase("x", 8000, 2) == 0  # a counter reset starts again


def test_the_health_report_carries_the_drive_inventory() -> None:
    from tests.agent.agent_fakes import FakeControlPlane
    from tests.agent.test_agent import make_agent, run

    cp = FakeControlPlane()
    agent = make_agent(cp)
    run(agent, 400)
    reports = [r for r in cp.health_reports if "drives" in r]
    assert reports and {d["serial"] for d in reports[-1]["drives"]} == {d["serial"] for d in agent.hardware.drives()}
    assert all(
        set(d) == {"serial", "model", "capacity_gb", "self_encrypting", "purge_supported"}
        for d in reports[-1]["drives"]
    )
