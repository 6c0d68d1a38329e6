"""`make loadtest` / `python -m benchmarks.loadtest`: N node agents (locust, headless) against
gunicorn on PostgreSQL, reported per endpoint: requests/s, p50, p99, errors.

It recreates its own database (the configured one with `_loadtest` appended; PostgreSQL only:
the figure is for the production stack), seeds N nodes, mints their agent tokens, starts
gunicorn with `--workers` processes on a free port, runs locust (benchmarks/locustfile.py)
for `--duration` seconds (every agent at a random phase of its interval), and prints the table with the machine
and its load average, and the web workers that figure implies per 10,000 nodes.

Client and server share this machine: locust's CPU is taken from the web workers, so the
figures are a floor for a server with the cores to itself.
"""

import argparse
import base64
import csv
import os
import platform
import secrets
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CALLS_PER_NODE = 2  # a heartbeat and a desired-state poll per interval
P99_BUDGET_MS = 50


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _environment() -> dict:
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith("postgres"):
        raise SystemExit("The load test runs on PostgreSQL: set DATABASE_URL (and LEDGER_DATABASE_URL).")
    env = dict(os.environ)
    for var in ("DATABASE_URL", "LEDGER_DATABASE_URL"):
        base, _, name = env.get(var, url).rpartition("/")
        env[var] = f"{base}/{name.split('?')[0]}_loadtest{'_ledger' if var.startswith('LEDGER') else ''}"
    # Production settings (DEBUG off, the real throttles) with throwaway keys for this run.
    env.update(
        DJANGO_SETTINGS_MODULE="config.settings",
        DEBUG="false",
        SECRET_KEY=secrets.token_urlsafe(48),
        AGENT_TOKEN_KEY=secrets.token_urlsafe(48),
        METERING_GRANT_KEY=secrets.token_urlsafe(48),
        BMC_CREDENTIAL_KEY=base64.urlsafe_b64encode(secrets.token_bytes(32)).decode(),  # a Fernet key
        SECURE_SSL_REDIRECT="false",
        ACCESS_LOG_LEVEL="WARNING",
    )
    return env


def _prepare(env: dict, nodes: int, tokens_path: Path) -> None:
    """Recreate the database, migrate, seed `nodes` nodes and write their tokens (a child
    process, so this one never loads Django with the run's settings)."""
    script = f"""
import json, os, psycopg, django
from django.conf import settings
django.setup()
from django.db import connections
for alias in ("default", "ledger"):
    s = connections[alias].settings_dict
    params = {{k: v for k, v in dict(host=s["HOST"], port=s["PORT"] or None, user=s["USER"], password=s["PASSWORD"]).items() if v}}
    with psycopg.connect(dbname="postgres", autocommit=True, **params) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{{s["NAME"]}}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{{s["NAME"]}}"')
from django.core.management import call_command
call_command("migrate", verbosity=0)
call_command("migrate", database="ledger", verbosity=0)
from devtools.services.fleet_seed import seed_fleet
seed_fleet(gpus={nodes * 8})
from core.api.agent_tokens import mint_agent_token
from fleet.models import Node
ids = list(Node.objects.order_by("hostname").values_list("pk", flat=True)[:{nodes}])
open({str(tokens_path)!r}, "w").write(json.dumps([mint_agent_token(i) for i in ids]))
"""
    subprocess.run([sys.executable, "-c", script], env=env, cwd=ROOT, check=True)


def _serve(env: dict, workers: int, port: int) -> subprocess.Popen:
    server = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "config.wsgi:application", "-b", f"127.0.0.1:{port}", "-w", str(workers)],
        env=env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/schema/", timeout=5)
            return server
        except OSError:
            time.sleep(0.3)
    server.terminate()
    raise SystemExit("gunicorn did not start within 60 s")


def _rows(stats_csv: Path) -> list[dict]:
    with stats_csv.open() as handle:
        return list(csv.DictReader(handle))


def report(rows: list[dict], *, nodes: int, workers: int, interval: float, load: tuple) -> list[str]:
    """The table, and the web workers per 10,000 nodes the measured rate implies."""
    lines = [
        f"Machine: {platform.machine()}, {os.cpu_count()} cores (shared: locust runs on it too), "
        f"Python {platform.python_version()}; load average {load[0]:.1f} before, {load[1]:.1f} after",
        f"{nodes} agents every {interval:g} s against gunicorn -w {workers}",
        f"{'endpoint':<15} {'requests':>9} {'req/s':>8} {'p50 ms':>7} {'p99 ms':>7} {'errors':>7}",
    ]
    total = None
    for row in rows:
        name = row["Name"]
        line = (
            f"{name:<15} {int(row['Request Count']):>9} {float(row['Requests/s']):>8.1f} "
            f"{row['50%']:>7} {row['99%']:>7} {int(row['Failure Count']):>7}"
        )
        lines.append(line)
        if name == "Aggregated":
            total = row
    if total is not None:
        served = float(total["Requests/s"]) - float(total["Failures/s"])
        offered = nodes * CALLS_PER_NODE / interval
        p99 = float(total["99%"])
        verdict = "within" if p99 <= P99_BUDGET_MS else "OVER"
        per_worker = served / workers
        lines.append(
            f"served {served:.0f} of {offered:.0f} offered calls/s, aggregate p99 {p99:.0f} ms ({verdict} the "
            f"{P99_BUDGET_MS} ms budget); {per_worker:.0f} calls/s per web worker"
        )
        if per_worker > 0:
            needed = 10_000 * CALLS_PER_NODE / 10 / per_worker
            lines.append(
                f"web workers per 10,000 nodes (2 calls per node per 10 s = 2,000 calls/s): {needed:.1f} at this "
                "rate per worker (valid only if the run above was within budget and served what was offered)"
            )
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Load-test the agent API with locust against gunicorn.")
    parser.add_argument("--nodes", type=int, default=2048, help="simulated agents (one seeded node each)")
    parser.add_argument("--workers", type=int, default=2, help="gunicorn worker processes")
    parser.add_argument(
        "--duration",
        type=int,
        default=60,
        help="seconds measured (every agent starts at once, each at a random phase of its interval)",
    )
    parser.add_argument("--interval", type=float, default=10.0, help="seconds between an agent's calls")
    args = parser.parse_args(argv)
    if not (1 <= args.nodes <= 200_000 and 1 <= args.workers <= 64 and 5 <= args.duration <= 3600):
        raise SystemExit("--nodes 1..200000, --workers 1..64, --duration 5..3600")
    env = _environment()
    out = ROOT / "var" / "loadtest"
    out.mkdir(parents=True, exist_ok=True)
    tokens = out / "tokens.json"
    print(f"seeding {args.nodes} nodes…", flush=True)
    _prepare(env, args.nodes, tokens)
    port = _free_port()
    server = _serve(env, args.workers, port)
    load_before = os.getloadavg()[0]
    # All agents start at once; each waits a random share of its first interval (the
    # locustfile), so the calls arrive spread evenly from the first second on.
    ramp = args.nodes
    try:
        print(f"running locust: {args.nodes} agents at random phases, for {args.duration} s…", flush=True)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "locust",
                "-f",
                str(ROOT / "benchmarks" / "locustfile.py"),
                "--headless",
                "--only-summary",
                "-u",
                str(args.nodes),
                "-r",
                str(ramp),
                "-t",
                f"{int(args.duration)}s",
                "--host",
                f"http://127.0.0.1:{port}",
                "--csv",
                str(out / "run"),
                "--reset-stats",
            ],
            env={**env, "HANGAR_LOADTEST_TOKENS": str(tokens), "HANGAR_LOADTEST_INTERVAL": str(args.interval)},
            cwd=ROOT,
            check=False,
        )
    finally:
        server.terminate()
        server.wait(timeout=30)
    lines = report(
        _rows(out / "run_stats.csv"),
        nodes=args.nodes,
        workers=args.workers,
        interval=args.interval,
        load=(load_before, os.getloadavg()[0]),
    )
    print("\n".join(lines))
    (out / "report.txt").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
