"""Copies of a test database, and pointing a connection alias at one of them.

A seeded database is built once per session (per xdist worker) as a copy of the freshly
migrated test database, and tests that need the seed run against it, each inside its own
rolled-back transaction as usual. PostgreSQL copies with `CREATE DATABASE … TEMPLATE …`;
SQLite (a file while testing, see config/test_settings.py) with its online backup API, which
also carries what is still in the write-ahead log.
"""

import os
import sqlite3
import time

from django.db import connections


def is_sqlite(alias: str) -> bool:
    return connections[alias].vendor == "sqlite"


def database_name(alias: str) -> str:
    return connections[alias].settings_dict["NAME"]


def point_at(alias: str, name: str) -> None:
    """Make `alias` use database `name` from its next query on (closes the open connection)."""
    connection = connections[alias]
    if connection.settings_dict["NAME"] == name:
        return
    connection.close()
    connection.settings_dict["NAME"] = name


def clone(alias: str, target: str) -> None:
    """Create database `target` as a copy of the one `alias` uses now (replacing any old copy)."""
    connection = connections[alias]
    source = connection.settings_dict["NAME"]
    connection.close()  # PostgreSQL copies a template only while nobody is connected to it
    if connection.vendor == "sqlite":
        if str(source).startswith("file:") or source == ":memory:":
            raise RuntimeError(f"{alias}: an in-memory SQLite test database cannot be copied; give it a file name")
        drop(alias, target)
        with sqlite3.connect(source) as src, sqlite3.connect(target) as dst:
            src.backup(dst)
        src.close()
        dst.close()
        return
    quote = connection.ops.quote_name
    drop(alias, target)
    for attempt in range(20):
        try:
            with connection._nodb_cursor() as cursor:
                cursor.execute(f"CREATE DATABASE {quote(target)} TEMPLATE {quote(source)}")
            return
        except Exception as exc:  # "source database is being accessed by other users" (autovacuum)
            if "being accessed by other users" not in str(exc) or attempt == 19:
                raise
            time.sleep(0.25)


def drop(alias: str, name: str) -> None:
    connection = connections[alias]
    if connection.vendor == "sqlite":
        for suffix in ("", "-wal", "-shm", "-journal"):
            try:
                os.remove(f"{name}{suffix}")
            except FileNotFoundError:
                pass
        return
    # WITH (FORCE): a live server's or a simulator's thread may still hold a connection to the
    # copy when the session ends; the copy is ours alone, so those connections are ended with it.
    with connection._nodb_cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS {connection.ops.quote_name(name)} WITH (FORCE)")
