"""Local SQLite spool for outbound messages (meter events, action results, health reports).

Everything the control plane must eventually receive is written here first, so an
outage or an agent restart loses nothing. Messages leave in insertion order per
kind and are deleted only once the server has acknowledged them. The spool also
keeps the agent's small persistent state (metering cursor, finished action ids).
"""

from __future__ import annotations

import json
import logging
import random
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from .transport import (
    AuthError,
    PermanentError,
    RetryableError,
    TransportError,
    backoff_delay,
)

log = logging.getLogger(__name__)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS outbox (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT NOT NULL,
    key TEXT UNIQUE,
    payload TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS outbox_kind_seq ON outbox (kind, seq);
CREATE TABLE IF NOT EXISTS dead_letter (
    seq INTEGER PRIMARY KEY,
    kind TEXT NOT NULL,
    key TEXT,
    payload TEXT NOT NULL,
    reason TEXT NOT NULL,
    parked_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS state (
    name TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
"""


@dataclass(frozen=True)
class SpooledMessage:
    seq: int
    kind: str
    payload: dict[str, Any]


class Spool:
    """A durable FIFO per message kind. Use ":memory:" for a throwaway spool (simulator, tests)."""

    def __init__(self, path: str | Path) -> None:
        if str(path) != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        # Built on one thread and used on another (the simulator creates agents on its main thread
        # and steps each on its lane's); one agent is never stepped by two threads at once.
        self._db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(_SCHEMA)

    def close(self) -> None:
        self._db.close()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Group writes (events + cursor) so a crash never keeps one without the other."""
        if self._db.in_transaction:
            yield
            return
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def append(self, kind: str, payload: dict[str, Any], *, key: str | None = None) -> int | None:
        """Queue a message; a repeated `key` (e.g. an event id) is ignored. Returns its seq."""
        cur = self._db.execute(
            "INSERT OR IGNORE INTO outbox (kind, key, payload, created_at) VALUES (?, ?, ?, ?)",
            (kind, key, json.dumps(payload, sort_keys=True), _now()),
        )
        return cur.lastrowid if cur.rowcount else None

    def peek_batch(self, n: int, kind: str | None = None) -> list[SpooledMessage]:
        """The oldest `n` messages (of `kind`, if given), in insertion order, without removing them."""
        if kind is None:
            rows = self._db.execute("SELECT seq, kind, payload FROM outbox ORDER BY seq LIMIT ?", (n,))
        else:
            rows = self._db.execute(
                "SELECT seq, kind, payload FROM outbox WHERE kind = ? ORDER BY seq LIMIT ?", (kind, n)
            )
        return [SpooledMessage(seq, k, json.loads(p)) for seq, k, p in rows]

    def ack(self, seqs: list[int]) -> None:
        """Remove messages the server has acknowledged."""
        self._db.executemany("DELETE FROM outbox WHERE seq = ?", [(s,) for s in seqs])

    def park(self, seq: int, reason: str) -> None:
        """Move a message the server refuses for good into the dead-letter table, unblocking the queue."""
        with self.transaction():
            self._db.execute(
                "INSERT INTO dead_letter (seq, kind, key, payload, reason, parked_at) "
                "SELECT seq, kind, key, payload, ?, ? FROM outbox WHERE seq = ?",
                (reason, _now(), seq),
            )
            self._db.execute("DELETE FROM outbox WHERE seq = ?", (seq,))

    def pending(self, kind: str | None = None) -> int:
        if kind is None:
            return self._db.execute("SELECT COUNT(*) FROM outbox").fetchone()[0]
        return self._db.execute("SELECT COUNT(*) FROM outbox WHERE kind = ?", (kind,)).fetchone()[0]

    def dead_letters(self) -> list[tuple[SpooledMessage, str]]:
        rows = self._db.execute("SELECT seq, kind, payload, reason FROM dead_letter ORDER BY seq")
        return [(SpooledMessage(seq, k, json.loads(p)), reason) for seq, k, p, reason in rows]

    def get_state(self, name: str, default: Any = None) -> Any:
        row = self._db.execute("SELECT value FROM state WHERE name = ?", (name,)).fetchone()
        return json.loads(row[0]) if row else default

    def set_state(self, name: str, value: Any) -> None:
        self._db.execute(
            "INSERT INTO state (name, value) VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET value = excluded.value",
            (name, json.dumps(value, sort_keys=True)),
        )


class Flusher:
    """Sends one kind of spooled message in order, in batches, backing off on failure.

    A retryable failure stops the flush and schedules the next try with capped,
    fully jittered exponential backoff; order is kept because nothing is acked
    until the server accepted it. A permanent refusal of a batch is bisected down
    to the offending message, which is parked in the dead-letter table so one bad
    event cannot block the queue forever. Auth failures park nothing: the token is
    wrong, not the messages.
    """

    def __init__(
        self,
        spool: Spool,
        kind: str,
        send: Callable[[list[dict[str, Any]]], Any],
        *,
        batch_size: int = 1,
        rng: random.Random | None = None,
        backoff_base: float = 0.5,
        backoff_cap: float = 60.0,
        max_batches: int = 10,
    ) -> None:
        self.spool = spool
        self.kind = kind
        self.send = send
        self.batch_size = batch_size
        self.rng = rng or random.Random()
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self.max_batches = max_batches
        self.failures = 0
        self.next_attempt: datetime | None = None

    def flush(self, now: datetime) -> int:
        """Send up to `max_batches` batches if not backing off; returns messages acknowledged."""
        if self.next_attempt is not None and now < self.next_attempt:
            return 0
        sent = 0
        try:
            for _ in range(self.max_batches):
                batch = self.spool.peek_batch(self.batch_size, self.kind)
                if not batch:
                    break
                sent += self._deliver(batch)
        except TransportError as exc:
            self.failures += 1
            delay = backoff_delay(self.failures, base=self.backoff_base, cap=self.backoff_cap, rng=self.rng)
            if isinstance(exc, RetryableError) and exc.retry_after is not None:
                delay = min(max(delay, exc.retry_after), self.backoff_cap)
            self.next_attempt = now + timedelta(seconds=delay)
            log.warning(
                "sending %s failed (%s); %d queued, next try in %.1fs",
                self.kind,
                exc,
                self.spool.pending(self.kind),
                delay,
            )
            return sent
        self.failures = 0
        self.next_attempt = None
        return sent

    def _deliver(self, batch: list[SpooledMessage]) -> int:
        try:
            self.send([m.payload for m in batch])
        except AuthError:
            raise
        except PermanentError as exc:
            if len(batch) == 1:
                log.error("server refused %s seq=%d for good (%s); parked in dead_letter", self.kind, batch[0].seq, exc)
                self.spool.park(batch[0].seq, f"{exc}: {exc.body}")
                return 0
            half = len(batch) // 2
            return self._deliver(batch[:half]) + self._deliver(batch[half:])
        self.spool.ack([m.seq for m in batch])
        return len(batch)


def _now() -> str:
    return datetime.now(UTC).isoformat()
