"""A real Redfish service for the demo and the tests: sushy-tools' `sushy-emulator` with its
fake systems driver (no virtualisation), on a free loopback port, with HTTP basic auth from an
htpasswd file. Nothing here imports Django: the test fixtures and `manage.py demo` both use it.

The fake driver keeps each system's power state and applies a reset after a random 1-11 s,
as real hardware takes time; the emulator serves no serial, model, chassis power readings,
firmware inventory or manager reset, so those paths meet a real "not supported" answer.
"""

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import bcrypt
import requests

NAMESPACE = uuid.UUID("6c1c1f9e-6f53-4d3b-9a53-8d4f3a6c0b19")  # system UUIDs derive from names


def system_uuid(name: str) -> str:
    return str(uuid.uuid5(NAMESPACE, name))


def system_mac(name: str, nic: int = 0) -> str:
    digest = uuid.uuid5(NAMESPACE, f"{name}/nic{nic}").bytes
    return "52:54:00:" + ":".join(f"{b:02x}" for b in digest[:3])  # 52:54:00 = locally administered


def fake_system(name: str, power_state: str = "On") -> dict:
    return {
        "uuid": system_uuid(name),
        "name": name,
        "power_state": power_state,
        "external_notifier": False,
        "nics": [{"mac": system_mac(name, 0), "ip": ""}, {"mac": system_mac(name, 1), "ip": ""}],
    }


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class RedfishEmulator:
    """One sushy-emulator process. `start()` blocks until it answers (or raises)."""

    systems: list[str]
    username: str = "admin"
    password: str = "redfish-emulator-password"
    disable_power_off: bool = False
    port: int = 0
    workdir: Path | None = None
    process: subprocess.Popen | None = field(default=None, repr=False)
    _own_workdir: bool = False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def system_path(self, name: str) -> str:
        return f"/redfish/v1/Systems/{system_uuid(name)}"

    def _write_config(self) -> Path:
        # bcrypt at 4 rounds: the emulator checks the password on every request, and the default
        # 12 rounds (~0.25 s each) would make the emulator, not Hangar, the bottleneck.
        digest = bcrypt.hashpw(self.password.encode(), bcrypt.gensalt(rounds=4)).decode()
        (self.workdir / "htpasswd").write_text(f"{self.username}:{digest}\n")
        config = {
            "SUSHY_EMULATOR_LISTEN_IP": "127.0.0.1",
            "SUSHY_EMULATOR_LISTEN_PORT": self.port,
            "SUSHY_EMULATOR_FAKE_DRIVER": True,
            "SUSHY_EMULATOR_FAKE_SYSTEMS": [fake_system(n) for n in self.systems],
            "SUSHY_EMULATOR_AUTH_FILE": str(self.workdir / "htpasswd"),
            "SUSHY_EMULATOR_STATE_DIR": str(self.workdir / "state"),
            "SUSHY_EMULATOR_DISABLE_POWER_OFF": self.disable_power_off,
            "SUSHY_EMULATOR_FEATURE_SET": "full",
        }
        path = self.workdir / "emulator.conf"
        path.write_text("".join(f"{key} = {value!r}\n" for key, value in config.items()))  # a Python file
        return path

    def start(self, timeout_s: float = 30.0) -> "RedfishEmulator":
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix="hangar-redfish-"))
            self._own_workdir = True
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_port()
        config = self._write_config()
        executable = shutil.which("sushy-emulator", path=str(Path(sys.executable).parent)) or "sushy-emulator"
        log = open(self.workdir / "emulator.log", "ab")  # noqa: SIM115 - lives as long as the process
        self.process = subprocess.Popen(
            [executable, "--config", str(config)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"sushy-emulator exited with {self.process.returncode}: {self.log_tail()}")
            try:
                if requests.get(f"{self.url}/redfish/v1/", timeout=1).ok:
                    return self
            except requests.RequestException:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"sushy-emulator did not answer on {self.url} within {timeout_s} s: {self.log_tail()}")

    def log_tail(self) -> str:
        path = self.workdir / "emulator.log" if self.workdir else None
        return path.read_text(errors="replace")[-2000:] if path and path.exists() else ""

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        if self._own_workdir and self.workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    # Direct Redfish reads and writes, for tests that play the part of the hardware (a node
    # switched off at the rack) without going through Hangar.
    def _session(self) -> requests.Session:
        session = requests.Session()
        session.auth = (self.username, self.password)
        return session

    def power_state(self, name: str) -> str:
        return self._session().get(f"{self.url}{self.system_path(name)}", timeout=5).json()["PowerState"]

    def reset(self, name: str, reset_type: str) -> int:
        url = f"{self.url}{self.system_path(name)}/Actions/ComputerSystem.Reset"
        return self._session().post(url, json={"ResetType": reset_type}, timeout=5).status_code

    def wait_for_power(self, name: str, state: str, timeout_s: float = 20.0) -> str:
        """Wait for the fake driver's delayed reset to land (it applies after 1-11 s)."""
        deadline = time.monotonic() + timeout_s
        current = self.power_state(name)
        while current != state and time.monotonic() < deadline:
            time.sleep(0.25)
            current = self.power_state(name)
        return current


def main(argv=None) -> int:
    """`python -m devtools.redfish_emulator --port 8001 --systems-file FILE`: serve the systems
    named in FILE (one per line) until stopped (`make demo` runs it)."""

    parser = argparse.ArgumentParser(description="Run sushy-emulator (fake driver) for the Hangar demo.")
    parser.add_argument("--port", type=int, default=8001)
    parser.add_argument("--systems-file", required=True)
    parser.add_argument("--username", default="admin")
    parser.add_argument("--password", default="redfish-emulator-password")
    args = parser.parse_args(argv)
    names = [n.strip() for n in Path(args.systems_file).read_text().splitlines() if n.strip()]
    emulator = RedfishEmulator(systems=names, port=args.port, username=args.username, password=args.password)
    emulator.start(timeout_s=120)
    print(f"Redfish emulator: {len(names)} systems at {emulator.url} (user {args.username})", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: (emulator.stop(), sys.exit(0)))
    try:
        emulator.process.wait()
    except KeyboardInterrupt:
        pass
    finally:
        emulator.stop()
    return emulator.process.returncode or 0


if __name__ == "__main__":
    sys.exit(main())
