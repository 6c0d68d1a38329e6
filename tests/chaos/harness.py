"""`make chaos`: the fault suite, on its OWN PostgreSQL cluster and Redis, never the developer's.

    python -m tests.chaos.harness [pytest args]

Starts a throw-away PostgreSQL cluster (initdb + pg_ctl, data under var/chaos/, a free port)
and a redis-server (a free port, no persistence), runs the fault tests against them with
DATABASE_URL / LEDGER_DATABASE_URL / REDIS_URL pointing there, then stops both and deletes
the cluster. The tests stop and start these servers themselves (HANGAR_CHAOS_* variables).
Figures measured by the tests land in var/chaos/figures.json (docs/faults.md quotes them).
"""

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHAOS_DIR = ROOT / "var" / "chaos"
# Tests that move the clock instead of waiting (11-minute broker outage, 6-minute control-plane
# outage, state deadlines across outages, future-dated health results, a dead leaf's links) run
# here too, on the chaos cluster; they are ordinary fast tests of `make test` as well.
CLOCK_MOVED_TESTS = [
    "tests/tenants/test_flow.py::test_allocations_accepted_during_an_11_minute_loop_outage_are_placed_not_failed",
    "tests/health/test_lapses.py",
    "tests/health/test_server_time.py",
    "tests/tenants/test_idempotency_crash.py",
    "tests/tenants/test_outages_by_clock.py",
    "tests/health/test_outage_deadlines.py",
    "tests/fleet/test_state_deadline_outage.py",
    "tests/health/test_fabric_incidents.py",
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _pg_bin(name: str) -> str:
    found = shutil.which(name)
    if found:
        return found
    for candidate in sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"), reverse=True):
        return str(candidate)
    raise SystemExit(f"{name} not found: install PostgreSQL server binaries (apt-get install postgresql)")


def _as_pg_user(cmd: list[str]) -> list[str]:
    """initdb and postgres refuse to run as root: run them as the `postgres` user then."""
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


def pg_ctl_command(action: str, data: Path, port: int, sockets: Path, log: Path) -> list[str]:
    options = f"-p {port} -k {sockets} -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off"
    cmd = [_pg_bin("pg_ctl"), "-D", str(data), "-l", str(log), "-w", "-t", "30"]
    if action == "start":
        cmd += ["-o", options, "start"]
    else:
        cmd += ["-m", "fast", "stop"]
    return _as_pg_user(cmd)


def main(argv: list[str]) -> int:
    if CHAOS_DIR.exists():
        shutil.rmtree(CHAOS_DIR)
    CHAOS_DIR.mkdir(parents=True)
    data, sockets, log = CHAOS_DIR / "pg", CHAOS_DIR / "sockets", CHAOS_DIR / "pg.log"
    sockets.mkdir()
    if os.geteuid() == 0:
        shutil.chown(CHAOS_DIR, "postgres")
        shutil.chown(sockets, "postgres")
    pg_port, redis_port = free_port(), free_port()
    subprocess.run(
        _as_pg_user([_pg_bin("initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8"]),
        check=True,
        capture_output=True,
    )
    start = pg_ctl_command("start", data, pg_port, sockets, log)
    stop = pg_ctl_command("stop", data, pg_port, sockets, log)
    subprocess.run(start, check=True, capture_output=True)
    redis = subprocess.Popen(
        [
            shutil.which("redis-server") or "redis-server",
            "--port",
            str(redis_port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    started = time.monotonic()
    try:
        base = f"postgres://postgres@127.0.0.1:{pg_port}"
        env = {
            **os.environ,
            "DATABASE_URL": f"{base}/hangar_chaos",
            "LEDGER_DATABASE_URL": f"{base}/hangar_chaos_ledger",
            "REDIS_URL": f"redis://127.0.0.1:{redis_port}/0",
            "HANGAR_VAR_DIR": str(CHAOS_DIR / "var"),
            "HANGAR_CHAOS_PG_START": "\x1f".join(start),
            "HANGAR_CHAOS_PG_STOP": "\x1f".join(stop),
            "HANGAR_CHAOS_FIGURES": str(CHAOS_DIR / "figures.json"),
            "HANGAR_FAULT_POINTS": "",
        }
        # The ledger the billing scenario's worker writes to (pytest-django makes test copies of
        # the rest); a real database on the throw-away cluster.
        subprocess.run(
            [_pg_bin("createdb"), "-h", "127.0.0.1", "-p", str(pg_port), "-U", "postgres", "hangar_chaos_ledger"],
            check=True,
            capture_output=True,
        )
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "--database", "ledger", "--noinput"],
            cwd=ROOT,
            env=env,
            check=True,
            capture_output=True,
        )
        tests = argv or ["tests/chaos", *CLOCK_MOVED_TESTS]
        result = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-x", *tests], cwd=ROOT, env=env
        )
        print(
            f"fault suite: {'passed' if result.returncode == 0 else 'FAILED'} in {time.monotonic() - started:.0f} s; "
            f"figures in {CHAOS_DIR / 'figures.json'}"
        )
        return result.returncode
    finally:
        redis.terminate()
        redis.wait(timeout=10)
        subprocess.run(stop, capture_output=True)
        figures = CHAOS_DIR / "figures.json"
        keep = figures.read_text() if figures.exists() else None
        shutil.rmtree(data, ignore_errors=True)
        if keep is not None:
            figures.write_text(keep)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
