"""Action executors, keyed by action name, that run without blocking the agent's tick.

`Executor.start(params, now)` returns an `ActionRun`; the agent calls
`run.poll(now)` every tick until it returns the result dict
{"status": "succeeded" | "failed", "detail": str, "output": dict}. Real executors
shell out through a `CommandRunner` (tests substitute one); simulated ones finish
after a realistic, speed-scaled duration and act on `SimulatedHardware`.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from random import Random
from typing import Any, Protocol

from .hardware.simulated import SimulatedHardware
from .verify_erase import sample_offsets

ACTIONS = ("provision", "stop", "wipe", "gpu_reset", "reboot", "dcgm_r1", "dcgm_r2", "dcgm_r3", "sanitize_drive")
WORKLOAD_UNIT = "hangar-workload@{}.service"
TENANT_DATA_DIR = "/var/lib/hangar/tenant"


def result(status: str, detail: str, output: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"status": status, "detail": detail, "output": output or {}}


class ActionRun(Protocol):
    def poll(self, now: datetime) -> dict[str, Any] | None:
        """The result once finished, else None."""


class Executor(Protocol):
    def start(self, params: dict[str, Any], now: datetime) -> ActionRun: ...


# ---- running commands --------------------------------------------------------------


@dataclass(frozen=True)
class CommandResult:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


class RunningCommand(Protocol):
    def poll(self) -> CommandResult | None: ...


class CommandRunner(Protocol):
    def start(self, argv: Sequence[str]) -> RunningCommand: ...


class _Process:
    """A child process whose output goes to temp files, so a chatty tool cannot fill a pipe and hang."""

    def __init__(self, argv: Sequence[str]) -> None:
        self.argv = tuple(argv)
        self.out = tempfile.TemporaryFile(mode="w+")
        self.err = tempfile.TemporaryFile(mode="w+")
        try:
            self.proc: subprocess.Popen[str] | None = subprocess.Popen(
                self.argv, stdout=self.out, stderr=self.err, stdin=subprocess.DEVNULL, text=True
            )
            self.error = ""
        except OSError as exc:
            self.proc, self.error = None, f"cannot run {self.argv[0]}: {exc}"

    def poll(self) -> CommandResult | None:
        if self.proc is None:
            return CommandResult(self.argv, 127, "", self.error)
        if self.proc.poll() is None:
            return None
        self.out.seek(0)
        self.err.seek(0)
        done = CommandResult(self.argv, self.proc.returncode, self.out.read(), self.err.read())
        self.out.close()
        self.err.close()
        return done


class SubprocessRunner:
    def start(self, argv: Sequence[str]) -> RunningCommand:
        return _Process(argv)


Finish = Callable[[list[CommandResult]], dict[str, Any]]


class CommandSequence:
    """Runs commands one after another, stopping at the first failure, then builds the result."""

    def __init__(self, runner: CommandRunner, commands: list[list[str]], finish: Finish) -> None:
        self.runner = runner
        self.pending = list(commands)
        self.finish = finish
        self.done: list[CommandResult] = []
        self.current: RunningCommand | None = None

    def poll(self, now: datetime) -> dict[str, Any] | None:
        while True:
            if self.current is None:
                if not self.pending:
                    return self.finish(self.done)
                self.current = self.runner.start(self.pending.pop(0))
            finished = self.current.poll()
            if finished is None:
                return None
            self.done.append(finished)
            self.current = None
            if finished.returncode != 0:
                return self.finish(self.done)


def _commands_ok(action: str) -> Finish:
    def finish(done: list[CommandResult]) -> dict[str, Any]:
        output = {
            "commands": [{"argv": list(c.argv), "returncode": c.returncode, "stderr": c.stderr[-2000:]} for c in done]
        }
        failed = [c for c in done if c.returncode != 0]
        if failed:
            c = failed[0]
            return result(
                "failed", f"{action}: {' '.join(c.argv)} exited {c.returncode}: {c.stderr.strip()[-300:]}", output
            )
        return result("succeeded", f"{action} done", output)

    return finish


class CommandExecutor:
    """An executor defined by a function from params to commands plus a result builder."""

    def __init__(
        self,
        runner: CommandRunner,
        commands: Callable[[dict[str, Any]], list[list[str]]],
        finish: Callable[[dict[str, Any]], Finish],
    ) -> None:
        self.runner = runner
        self.commands = commands
        self.finish = finish

    def start(self, params: dict[str, Any], now: datetime) -> ActionRun:
        try:
            commands = self.commands(params)
        except (KeyError, ValueError) as exc:
            return _Done(result("failed", f"bad params {params!r}: {exc}"))
        return CommandSequence(self.runner, commands, self.finish(params))


class _Done:
    def __init__(self, outcome: dict[str, Any]) -> None:
        self.outcome = outcome

    def poll(self, now: datetime) -> dict[str, Any] | None:
        return self.outcome


# ---- DCGM and sanitisation helpers (pure) -------------------------------------------


def parse_dcgm_json(text: str, level: int) -> dict[str, Any]:
    """Judge `dcgmi diag -r N -j` output: any Fail fails the run; Warn still passes."""
    try:
        doc = json.loads(text)
    except ValueError:
        return result("failed", f"dcgm_r{level}: unreadable dcgmi output", {"raw": text[-2000:]})
    counts = {"pass": 0, "fail": 0, "warn": 0, "skip": 0}
    problems: list[str] = []
    diag = doc.get("DCGM GPU Diagnostic", doc)
    for category in diag.get("test_categories", []):
        for test in category.get("tests", []):
            for entry in test.get("results", []):
                status = str(entry.get("status", "")).lower()
                counts[status] = counts.get(status, 0) + 1
                if status in ("fail", "warn"):
                    gpu = entry.get("gpu_id", entry.get("entity_id", "?"))
                    info = entry.get("info") or "; ".join(w.get("warning", "") for w in entry.get("warnings", []))
                    problems.append(f"{test.get('name')} gpu {gpu} {status}: {info}".strip())
    output = {"level": level, "counts": counts, "problems": problems, "version": diag.get("version")}
    if counts["fail"]:
        return result("failed", f"dcgm_r{level}: {counts['fail']} failed; " + "; ".join(problems[:5]), output)
    return result("succeeded", f"dcgm_r{level}: passed ({counts['warn']} warnings)", output)


SANITIZE_METHODS = {
    # NIST SP 800-88 Rev. 1 method: (technique, tool, erase command)
    "clear": (
        "user data erase (NVMe Format SES=1)",
        "nvme-cli format --ses=1",
        ["nvme", "format", "{device}", "--ses=1", "--force"],
    ),
    "purge": (
        "cryptographic erase (NVMe Format SES=2)",
        "nvme-cli format --ses=2",
        ["nvme", "format", "{device}", "--ses=2", "--force"],
    ),
}
VERIFY_SAMPLES = 64
# Erased NVMe namespaces read back as zeroes (DLFEAT): blocks sampled across the whole device
# (start, end and random offsets, a fresh seed each run) must all be zero (verify_erase).
VERIFY_COMMAND = [
    sys.executable,
    "-m",
    "hangar_agent.verify_erase",
    "{device}",
    "--samples",
    str(VERIFY_SAMPLES),
    "--seed",
    "{seed}",
]


def sanitization_record(
    *, serial: str, method: str, technique: str, tool: str, verified: bool, evidence: str
) -> dict[str, Any]:
    return {
        "drive_serial": serial,
        "method": method,
        "technique": technique,
        "tool": tool,
        "verified": verified,
        "evidence": evidence,
    }


def _sanitize_commands(params: dict[str, Any]) -> list[list[str]]:
    method = params.get("method", "purge")
    if method not in SANITIZE_METHODS:
        raise ValueError(f"method {method!r} cannot be done by the agent (destroy is physical)")
    device = params["device"]
    seed = params.setdefault("verify_seed", secrets.randbits(32))  # unpredictable to the drive
    erase = [part.format(device=device) for part in SANITIZE_METHODS[method][2]]
    return [erase, [part.format(device=device, seed=seed) for part in VERIFY_COMMAND]]


def _verify_report(text: str) -> dict[str, Any]:
    try:
        report = json.loads(text.strip().splitlines()[-1]) if text.strip() else {}
    except ValueError:
        return {}
    return report if isinstance(report, dict) else {}


def _sanitize_finish(params: dict[str, Any]) -> Finish:
    def finish(done: list[CommandResult]) -> dict[str, Any]:
        method = params.get("method", "purge")
        technique, tool, _ = SANITIZE_METHODS[method]
        log = "\n".join(f"$ {' '.join(c.argv)} -> {c.returncode}\n{c.stdout}{c.stderr}" for c in done)
        erased = bool(done) and done[0].returncode == 0
        sampled = _verify_report(done[1].stdout) if len(done) == 2 else {}
        verified = (
            erased and done[1].returncode == 0 and sampled.get("all_zero") is True and sampled.get("samples", 0) >= 2
        )
        record = sanitization_record(
            serial=params.get("serial", ""),
            method=method,
            technique=technique,
            tool=tool,
            verified=verified,
            evidence=f"sha256:{hashlib.sha256(log.encode()).hexdigest()} {log[-1500:]}",
        )
        status = "succeeded" if verified else "failed"
        detail = (
            f"{params['device']} ({record['drive_serial']}): {method} "
            f"{'verified' if verified else 'erase failed' if not erased else 'verification failed'}"
        )
        return result(status, detail, {"sanitization_record": record})

    return finish


def _dcgm(level: int) -> tuple[Callable[[dict[str, Any]], list[list[str]]], Callable[[dict[str, Any]], Finish]]:
    def commands(params: dict[str, Any]) -> list[list[str]]:
        return [["dcgmi", "diag", "-r", str(level), "-j"]]

    def finish(params: dict[str, Any]) -> Finish:
        def judge(done: list[CommandResult]) -> dict[str, Any]:
            # dcgmi exits non-zero when a test fails; the JSON says which.
            return (
                parse_dcgm_json(done[0].stdout, level)
                if done[0].stdout.strip()
                else result("failed", f"dcgm_r{level}: dcgmi exited {done[0].returncode}: {done[0].stderr[-300:]}")
            )

        return judge

    return commands, finish


def real_executors(runner: CommandRunner | None = None) -> dict[str, Executor]:
    """Executors that act on this machine through systemctl, nvidia-smi, dcgmi and nvme-cli."""
    runner = runner or SubprocessRunner()

    def plain(commands: Callable[[dict[str, Any]], list[list[str]]], action: str) -> CommandExecutor:
        return CommandExecutor(runner, commands, lambda params: _commands_ok(action))

    executors: dict[str, Executor] = {
        "provision": plain(lambda p: [["systemctl", "start", WORKLOAD_UNIT.format(p["allocation_id"])]], "provision"),
        "stop": plain(lambda p: [["systemctl", "stop", WORKLOAD_UNIT.format(p.get("allocation_id", "*"))]], "stop"),
        "wipe": plain(
            lambda p: [
                ["systemctl", "stop", WORKLOAD_UNIT.format("*")],
                ["find", TENANT_DATA_DIR, "-mindepth", "1", "-delete"],
                *[["blkdiscard", "-f", d] for d in p.get("devices", [])],
            ],
            "wipe",
        ),
        "gpu_reset": plain(
            lambda p: [["nvidia-smi", "-r"] + (["-i", str(int(p["gpu"]))] if p.get("gpu") is not None else [])],
            "gpu_reset",
        ),
        "reboot": plain(lambda p: [["systemctl", "reboot"]], "reboot"),
        "sanitize_drive": CommandExecutor(runner, _sanitize_commands, _sanitize_finish),
    }
    for level in (1, 2, 3, 4):
        executors[f"dcgm_r{level}"] = CommandExecutor(runner, *_dcgm(level))
    # Burn-in at intake: the long DCGM level (r4 adds the memory tests; reliability.csv).
    executors["burn_in"] = CommandExecutor(runner, *_dcgm(4))
    return executors


# ---- simulated executors --------------------------------------------------------------


class _Timed:
    def __init__(self, done_at: datetime, outcome: Callable[[], dict[str, Any]]) -> None:
        self.done_at = done_at
        self.outcome = outcome

    def poll(self, now: datetime) -> dict[str, Any] | None:
        return self.outcome() if now >= self.done_at else None


class SimulatedExecutor:
    """Finishes after a random duration (simulated seconds, scaled by the hardware's speed)."""

    def __init__(
        self,
        hardware: SimulatedHardware,
        rng: Random,
        seconds: tuple[float, float],
        outcome: Callable[[dict[str, Any]], dict[str, Any]],
        on_start: Callable[[dict[str, Any], timedelta], None] | None = None,
    ) -> None:
        self.hardware = hardware
        self.rng = rng
        self.seconds = seconds
        self.outcome = outcome
        self.on_start = on_start

    def start(self, params: dict[str, Any], now: datetime) -> ActionRun:
        duration = self.hardware.wall(self.rng.uniform(*self.seconds))
        if self.on_start is not None:
            self.on_start(params, duration)
        return _Timed(now + duration, lambda: self.outcome(params))


def simulated_executors(hardware: SimulatedHardware, rng: Random) -> dict[str, Executor]:
    """Executors for a simulated node: realistic durations, outcomes that follow its faults."""
    hw = hardware

    def provision(params: dict[str, Any]) -> dict[str, Any]:
        problems = hw.fault_summary(level=1)
        return result("failed", "; ".join(problems)) if problems else result("succeeded", "workload started")

    def gpu_reset(params: dict[str, Any]) -> dict[str, Any]:
        gpu = params.get("gpu")
        targets = range(len(hw.gpu_state)) if gpu is None else [int(gpu)]
        if any(hw.gpu_state[i].lost for i in targets):
            return result("failed", "nvidia-smi -r: GPU not found on the bus; a power cycle is needed")
        hw.reset_gpu(None if gpu is None else int(gpu))
        return result("succeeded", f"reset GPU {'all' if gpu is None else gpu}")

    def dcgm(level: int) -> Callable[[dict[str, Any]], dict[str, Any]]:
        def judge(params: dict[str, Any]) -> dict[str, Any]:
            problems = hw.fault_summary(level)
            output = {"level": level, "counts": {"fail": len(problems)}, "problems": problems}
            if problems:
                return result("failed", f"dcgm_r{level}: " + "; ".join(problems[:5]), output)
            return result("succeeded", f"dcgm_r{level}: passed", output)

        return judge

    def sanitize(params: dict[str, Any]) -> dict[str, Any]:
        method = params.get("method", "purge")
        if method not in SANITIZE_METHODS:
            return result("failed", f"method {method!r} cannot be done by the agent (destroy is physical)")
        serial = params.get("serial") or hw.drives()[0]["serial"]
        drive = next((d for d in hw.drives() if d["serial"] == serial), hw.drives()[0])
        offsets = sample_offsets(drive["capacity_gb"] * 10**9, rng=rng, samples=VERIFY_SAMPLES)
        record = sanitization_record(
            serial=serial,
            method=method,
            technique=SANITIZE_METHODS[method][0],
            tool="nvme format (simulated)",
            verified=True,
            evidence=f"simulated: {len(offsets)} blocks read back as zeroes, from offset "
            f"{offsets[0]} to {offsets[-1]} of {drive['capacity_gb']} GB "
            "(start, end and random offsets)",
        )
        return result("succeeded", f"{serial}: {method} verified", {"sanitization_record": record})

    def ok(detail: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
        return lambda params: result("succeeded", detail)

    dcgm_seconds = hw.reference.dcgm_seconds
    executors: dict[str, Executor] = {
        "provision": SimulatedExecutor(hw, rng, (60, 180), provision),
        "stop": SimulatedExecutor(hw, rng, (5, 30), ok("workload stopped")),
        "wipe": SimulatedExecutor(hw, rng, (180, 480), ok("tenant data and scratch drives wiped")),
        "gpu_reset": SimulatedExecutor(hw, rng, (20, 45), gpu_reset),
        "reboot": SimulatedExecutor(
            hw, rng, (300, 600), ok("host power-cycled and back"), on_start=lambda params, duration: hw.reboot(duration)
        ),
        "sanitize_drive": SimulatedExecutor(hw, rng, (60, 300), sanitize),
        # a node-level burn-in soak of hours, inside the 24 h stage facility.csv cites
        "burn_in": SimulatedExecutor(
            hw, rng, (4 * 3600, 8 * 3600), dcgm(4), on_start=lambda params, duration: hw.replace_parts()
        ),
        # reliability.csv says only "r4 longer (memtest)": simulated as two to four r3 runs
        "dcgm_r4": SimulatedExecutor(hw, rng, (2 * dcgm_seconds["dcgm_r3"], 4 * dcgm_seconds["dcgm_r3"]), dcgm(4)),
    }
    for level in (1, 2, 3):
        base = dcgm_seconds[f"dcgm_r{level}"]
        executors[f"dcgm_r{level}"] = SimulatedExecutor(hw, rng, (base * 0.8, base * 1.2), dcgm(level))
    return executors
