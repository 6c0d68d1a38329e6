"""The one registry of advisory locks held by periodic runs.

On PostgreSQL a run takes a transaction-level advisory lock (released at commit or crash),
so two workers never run the same loop at once. SQLite (the embedded default) serialises
writers anyway; there an exclusive file lock under var/ plays the same role.

A run that waits on the network between its writes takes a lease instead (`leased_run`): a
row taken and given back in short transactions of their own, so the run's writes commit batch
by batch and nothing stays locked while it waits. It works the same under a transaction-pooling
proxy (where a session-level advisory lock would not) and on SQLite.
"""

import fcntl
import hashlib
import os
import socket
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

from django.conf import settings
from django.db import DatabaseError, connections, transaction
from django.utils import timezone

from core.models import LoopLease

# Names of every loop that holds a lock. Adding a loop means adding its name here.
LOCK_NAMES = frozenset(
    {
        "reconcile_nodes",
        "allocation_loop",
        "health_sweep",
        "billing_run",
        "fleet_snapshot",
        "power_history",
        "rack_power",
        "advance_bring_up",
        "advance_rollouts",
        "bmc_power_sync",
        "ledger_partitions",
        "page_incidents",
        # Per node (two-key form: this name's high 32 bits, hash of the node id): meter ingest.
        "meter_ingest_node",
    }
)


def lock_id(name: str) -> int:
    if name not in LOCK_NAMES:
        raise KeyError(f"unknown advisory lock {name!r}: register it in core.locks.LOCK_NAMES")
    digest = hashlib.blake2b(f"hangar:{name}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


@contextmanager
def advisory_lock(name: str, *, using: str = "default") -> Iterator[bool]:
    """Yields True when this process holds the lock, False when another run holds it.

    On PostgreSQL this must be entered inside `transaction.atomic(using=...)`: the lock is
    released with the transaction.
    """
    key = lock_id(name)
    connection = connections[using]
    if connection.vendor == "postgresql":
        if not connection.in_atomic_block:
            raise RuntimeError("advisory_lock needs an open transaction on PostgreSQL")
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [key])
            yield bool(cursor.fetchone()[0])
        return
    lock_dir = settings.VAR_DIR / "locks"
    lock_dir.mkdir(parents=True, exist_ok=True)
    with open(lock_dir / f"{name}.lock", "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextmanager
def locked_run(name: str, *, using: str = "default") -> Iterator[bool]:
    """A transaction holding the loop's advisory lock: `with locked_run("x") as got: ...`."""
    with transaction.atomic(using=using), advisory_lock(name, using=using) as acquired:
        yield acquired


@contextmanager
def leased_run(name: str, *, ttl: timedelta) -> Iterator[bool]:
    """`with leased_run("x", ttl=...) as got: ...` with no transaction held for the run.

    Yields True when this run took the lease, False when another run holds an unexpired one.
    `ttl` must be at least the run's hard time limit: a worker killed mid-run leaves the lease
    behind, and the next run may take it only once the killed one cannot still be running."""
    lock_id(name)  # the same registry as the advisory locks
    holder = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    now = timezone.now()
    with transaction.atomic():
        LoopLease.objects.get_or_create(name=name, defaults={"expires_at": now})
        took = LoopLease.objects.filter(name=name, expires_at__lte=now).update(holder=holder, expires_at=now + ttl)
    if not took:
        yield False
        return
    try:
        yield True
    finally:
        try:
            LoopLease.objects.filter(name=name, holder=holder).update(holder="", expires_at=timezone.now())
        except DatabaseError:
            pass  # the database went away mid-run: the lease expires by itself
