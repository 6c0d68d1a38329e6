"""`make loadtest` / `python -m benchmarks.loadtest`: N node agents (locust, headless) against
gunicorn on PostgreSQL, reported per endpoint: requests/s, p50, p99, errors.

It recreates its own database (the configured one with `_loadtest` appended; PostgreSQL only:
the figure is for the production stack), seeds as many nodes as the largest step, mints their
agent tokens, starts gunicorn with `--workers` processes on a free port, and for each agent
count in `--nodes` (e.g. `1024,1536,2048`) runs locust (benchmarks/locustfile.py) for
`--duration` seconds against that same server (every agent at a random phase of its
interval). Each step prints its table; the end names the highest step within budget (p99 ≤
50 ms, no errors, every offered call served) with its heartbeats/s and polls/s, and the web
workers per 10,000 nodes that rate per worker implies.

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


def _serve(env: dict, workers: int, port: int, worker_class: str, threads: int) -> subprocess.Popen:
    command = [sys.executable, "-m", "gunicorn", "config.wsgi:application", "-b", f"127.0.0.1:{port}"]
    command += ["-w", str(workers), "-k", worker_class, "--threads", str(threads)]
    server = subprocess.Popen(
        command,
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


def _steps(text: str) -> list[int]:
    """`--nodes 1024,1536,2048` → [1024, 1536, 2048] (ascending, each 1..200,000)."""
    try:
        steps = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise SystemExit(f"--nodes takes agent counts separated by commas, not {text!r}") from None
    if not steps or not all(1 <= n <= 200_000 for n in steps):
        raise SystemExit("--nodes: each agent count 1..200000")
    return steps


def measure(rows: list[dict], *, nodes: int, workers: int, interval: float) -> dict:
    """One step's figures from locust's stats rows: per endpoint and overall."""
    by_name = {row["Name"]: row for row in rows}
    total = by_name.get("Aggregated")
    if total is None:
        raise SystemExit("locust wrote no aggregate row: did the run start?")
    served = float(total["Requests/s"]) - float(total["Failures/s"])
    offered = nodes * CALLS_PER_NODE / interval

    def endpoint(name):
        row = by_name.get(name)
        return (
            None
            if row is None
            else {"rate": float(row["Requests/s"]), "p50": float(row["50%"]), "p99": float(row["99%"])}
        )

    p99 = float(total["99%"])
    return {
        "nodes": nodes,
        "workers": workers,
        "offered": offered,
        "served": served,
        "p99": p99,
        "errors": int(total["Failure Count"]),
        "heartbeat": endpoint("heartbeat"),
        "desired-state": endpoint("desired-state"),
        # Within budget: the p99 fits, nothing failed, and the server kept up with the offer.
        "within": p99 <= P99_BUDGET_MS and int(total["Failure Count"]) == 0 and served >= 0.97 * offered,
    }


def report(rows: list[dict], *, nodes: int, workers: int, interval: float, load: tuple) -> list[str]:
    """One step's table."""
    figures = measure(rows, nodes=nodes, workers=workers, interval=interval)
    lines = [
        f"{nodes} agents every {interval:g} s against gunicorn -w {workers}; load average "
        f"{load[0]:.1f} before, {load[1]:.1f} after",
        f"{'endpoint':<15} {'requests':>9} {'req/s':>8} {'p50 ms':>7} {'p99 ms':>7} {'errors':>7}",
    ]
    for row in rows:
        lines.append(
            f"{row['Name']:<15} {int(row['Request Count']):>9} {float(row['Requests/s']):>8.1f} "
            f"{row['50%']:>7} {row['99%']:>7} {int(row['Failure Count']):>7}"
        )
    verdict = "within" if figures["within"] else "OVER"
    lines.append(
        f"served {figures['served']:.0f} of {figures['offered']:.0f} offered calls/s, aggregate p99 "
        f"{figures['p99']:.0f} ms: {verdict} the {P99_BUDGET_MS} ms budget"
    )
    return lines


def summary(steps: list[dict]) -> list[str]:
    """The highest step within budget, and the web workers per 10,000 nodes it implies."""
    machine = (
        f"Machine: {platform.machine()}, {os.cpu_count()} cores (shared: locust runs on it too), "
        f"Python {platform.python_version()}"
    )
    passed = [step for step in steps if step["within"]]
    if not passed:
        return [
            machine,
            f"no step stayed within p99 {P99_BUDGET_MS} ms with every call served: "
            "rerun with fewer agents (--nodes) or more workers (--workers)",
        ]
    best = passed[-1]
    per_worker = best["served"] / best["workers"]
    needed = 10_000 * CALLS_PER_NODE / 10 / per_worker
    heartbeat, poll = best["heartbeat"] or {"rate": 0}, best["desired-state"] or {"rate": 0}
    lines = [
        machine,
        f"highest load within p99 {P99_BUDGET_MS} ms: {best['nodes']} agents, {heartbeat['rate']:.0f} heartbeats/s "
        f"and {poll['rate']:.0f} desired-state polls/s on {best['workers']} workers ({per_worker:.0f} calls/s each)",
        f"web workers per 10,000 nodes (2,000 calls/s) at that rate per worker: {needed:.1f}",
    ]
    failed = [step for step in steps if not step["within"] and step["nodes"] > best["nodes"]]
    if failed:
        first = failed[0]
        lines.append(
            f"over budget from {first['nodes']} agents: served {first['served']:.0f} of {first['offered']:.0f} calls/s, "
            f"p99 {first['p99']:.0f} ms"
        )
    return lines


def _locust(env: dict, tokens: Path, port: int, nodes: int, duration: int, interval: float, csv_prefix: Path) -> None:
    # All agents start at once; each waits a random share of its first interval (the
    # locustfile), so the calls arrive spread evenly from the first second on.
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
            str(nodes),
            "-r",
            str(nodes),
            "-t",
            f"{int(duration)}s",
            "--host",
            f"http://127.0.0.1:{port}",
            "--csv",
            str(csv_prefix),
            "--reset-stats",
        ],
        env={**env, "HANGAR_LOADTEST_TOKENS": str(tokens), "HANGAR_LOADTEST_INTERVAL": str(interval)},
        cwd=ROOT,
        check=False,
        stdout=subprocess.DEVNULL,  # its own summary; the step's table below is read from its CSV
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Load-test the agent API with locust against gunicorn.")
    parser.add_argument(
        "--nodes",
        default="2048",
        help="simulated agents (one seeded node each); several, comma-separated, run one after another "
        "against the same server and report the highest within the p99 budget",
    )
    parser.add_argument("--workers", type=int, default=2, help="gunicorn worker processes")
    parser.add_argument(
        "--duration",
        type=int,
        default=60,
        help="seconds measured per step (every agent starts at once, each at a random phase of its interval)",
    )
    parser.add_argument("--worker-class", default="sync", choices=("sync", "gthread"), help="gunicorn -k")
    parser.add_argument("--threads", type=int, default=1, help="gunicorn --threads (gthread)")
    parser.add_argument("--interval", type=float, default=10.0, help="seconds between an agent's calls")
    args = parser.parse_args(argv)
    steps = _steps(args.nodes)
    if not (1 <= args.workers <= 64 and 5 <= args.duration <= 3600 and 1 <= args.threads <= 64):
        raise SystemExit("--workers 1..64, --threads 1..64, --duration 5..3600")
    env = _environment()
    out = ROOT / "var" / "loadtest"
    out.mkdir(parents=True, exist_ok=True)
    tokens = out / "tokens.json"
    print(f"seeding {steps[-1]} nodes…", flush=True)
    _prepare(env, steps[-1], tokens)
    port = _free_port()
    server = _serve(env, args.workers, port, args.worker_class, args.threads)
    lines, results = [], []
    try:
        for nodes in steps:
            print(f"running locust: {nodes} agents at random phases, for {args.duration} s…", flush=True)
            load_before = os.getloadavg()[0]
            _locust(env, tokens, port, nodes, args.duration, args.interval, out / f"run-{nodes}")
            rows = _rows(out / f"run-{nodes}_stats.csv")
            step = report(
                rows, nodes=nodes, workers=args.workers, interval=args.interval, load=(load_before, os.getloadavg()[0])
            )
            print("\n".join(step), flush=True)
            lines += [*step, ""]
            results.append(measure(rows, nodes=nodes, workers=args.workers, interval=args.interval))
    finally:
        server.terminate()
        server.wait(timeout=30)
    lines += summary(results)
    print("\n".join(summary(results)))
    (out / "report.txt").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
