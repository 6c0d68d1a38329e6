"""`make bench`: build the fixtures in a dedicated benchmark database and print the table.

The benchmark database is the configured one with `_bench` appended (PostgreSQL) or
var/bench*.sqlite3 (SQLite), recreated on every run, so the demo's data is never touched.
"""

import argparse
import importlib
import os
import pkgutil
import platform
import sys
import time
from pathlib import Path


def _bench_database_urls() -> None:
    for var, default_name in (("DATABASE_URL", "bench"), ("LEDGER_DATABASE_URL", "bench_ledger")):
        url = os.environ.get(var, "")
        if url.startswith("postgres"):
            base, _, name = url.rpartition("/")
            os.environ[var] = f"{base}/{name.split('?')[0]}_bench"
        else:
            var_dir = Path(os.environ.get("HANGAR_VAR_DIR", Path(__file__).resolve().parent.parent / "var"))
            path = var_dir / f"{default_name}.sqlite3"
            for suffix in ("", "-wal", "-shm"):
                Path(f"{path}{suffix}").unlink(missing_ok=True)
            os.environ[var] = f"sqlite:///{path}"


def _recreate_postgres(alias: str) -> None:
    import psycopg
    from django.db import connections

    settings_dict = connections[alias].settings_dict
    if not connections[alias].vendor == "postgresql":
        return
    params = {
        k: v
        for k, v in {
            "host": settings_dict["HOST"],
            "port": settings_dict["PORT"] or None,
            "user": settings_dict["USER"],
            "password": settings_dict["PASSWORD"],
        }.items()
        if v
    }
    with psycopg.connect(dbname="postgres", autocommit=True, **params) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{settings_dict["NAME"]}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{settings_dict["NAME"]}"')


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Run Hangar's benchmarks.")
    parser.add_argument("--only", help="run only benchmarks whose name contains this text (or any of A|B|…)")
    args = parser.parse_args(argv)
    _bench_database_urls()
    # DEBUG off (it records every query and would skew the timings) with the suite's local keys.
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.test_settings")
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    from benchmarks import fixtures
    from benchmarks.harness import REGISTRY, Table

    for module in pkgutil.iter_modules([str(Path(__file__).parent)]):
        if module.name.startswith("bench_"):
            importlib.import_module(f"benchmarks.{module.name}")
    if os.environ.get("BENCH_REUSE_DATABASE"):
        # Iterating on one row: keep the last run's databases and fixtures (each builder checks).
        print("reusing the benchmark databases of the last run (BENCH_REUSE_DATABASE)", flush=True)
    else:
        _recreate_postgres("default")
        _recreate_postgres("ledger")
    print(f"Benchmark database: {connection.vendor} ({connection.settings_dict['NAME']})", flush=True)
    call_command("migrate", verbosity=0)
    call_command("migrate", database="ledger", verbosity=0)
    wanted = args.only.split("|") if args.only else []
    selected = [b for b in REGISTRY if not wanted or any(text in b.name for text in wanted)]
    # The 125,000-node fleet and the 50,000,000-event ledger are fixtures of their own: their rows
    # run alone (building either takes many minutes), selected by --only.
    alone = {b.fixture for b in selected} & set(fixtures.ALONE)
    if len({b.fixture for b in selected}) > 1 and alone:
        for fixture in sorted(alone):
            skipped = [b for b in selected if b.fixture == fixture]
            print(
                f"skipping {len(skipped)} row(s) of {fixture}; run them alone: --only '{fixtures.ALONE[fixture]}'",
                flush=True,
            )
        selected = [b for b in selected if b.fixture not in alone]
    selected.sort(key=lambda b: b.fixture != "empty")  # the fixture-building rows run first
    table = Table()
    built = set()
    for bench in selected:
        if bench.fixture not in built and bench.fixture != "empty":
            print(f"building fixture {bench.fixture}…", flush=True)
            fixtures.build(bench.fixture)
            built.add(bench.fixture)
        started = time.monotonic()
        print(f"running {bench.name}…", flush=True)
        table.add(bench, bench.run())
        print(f"  done in {time.monotonic() - started:.1f} s", flush=True)
    print()
    print(
        f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"database {connection.vendor}"
    )
    print(table.render())
    return 0


if __name__ == "__main__":
    sys.exit(main())
