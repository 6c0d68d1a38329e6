"""Usage metering: contiguous `[start, end)` GPU-second events per allocation.

The agent is the meter. While the node runs a tenant's workload it closes one
event per `meter_interval`; when the allocation changes or ends it closes the
partial interval at once, so consecutive events of an allocation are contiguous.
Events get their uuid4 `event_id` at creation and are spooled before sending,
so replay after an outage or restart is harmless (the ledger dedupes by id).
Each event carries the metering grant (from desired-state) that covers its
allocation and interval: the ledger charges nothing without one.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from .spool import Spool

METER_KIND = "meter"
CURSOR_STATE = "meter_cursor"


def rfc3339(moment: datetime) -> str:
    """RFC 3339 UTC with a trailing Z, e.g. 2026-11-29T20:00:00Z."""
    moment = moment.astimezone(UTC)
    spec = "microseconds" if moment.microsecond else "seconds"
    return moment.replace(tzinfo=None).isoformat(timespec=spec) + "Z"


def parse_rfc3339(text: str) -> datetime:
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        raise ValueError(f"timestamp without timezone: {text!r}")
    return moment.astimezone(UTC)


def gpu_seconds(gpus: int, start: datetime, end: datetime) -> str:
    """GPUs x seconds in [start, end) as an exact decimal string."""
    delta = end - start
    seconds = Decimal(delta.days * 86400 + delta.seconds) + Decimal(delta.microseconds) / Decimal(10**6)
    return format((Decimal(gpus) * seconds).normalize(), "f")


@dataclass(frozen=True)
class Usage:
    """What is being metered: one allocation on this node."""

    allocation_id: str
    tenant_id: str
    sku: str
    gpus: int


class Meter:
    """Turns observations of "this allocation is running now" into spooled meter events.

    The cursor (current usage, interval start, last observation) is persisted in
    the spool with the events in one transaction, so a restarted agent continues
    the same contiguous series. If the agent saw nothing for longer than
    `max_gap` (host down, agent stopped), the open interval is closed at the last
    observation: time nobody observed is not billed.
    """

    def __init__(
        self,
        spool: Spool,
        *,
        interval: float = 60.0,
        max_gap: float | None = None,
        new_id: Callable[[], str] = lambda: str(uuid.uuid4()),
        grant_for: Callable[[Usage, datetime, datetime], str | None] = lambda usage, start, end: None,
    ) -> None:
        self.spool = spool
        self.grant_for = grant_for
        self.interval = timedelta(seconds=interval)
        self.max_gap = timedelta(seconds=max_gap if max_gap is not None else 2 * interval)
        self.new_id = new_id

    def observe(self, now: datetime, usage: Usage | None) -> list[dict[str, Any]]:
        """Record that `usage` (or nothing) is running at `now`; returns the events closed."""
        now = now.astimezone(UTC).replace(microsecond=0)
        state = self.spool.get_state(CURSOR_STATE)
        events: list[dict[str, Any]] = []
        open_usage: Usage | None = None
        start = now
        if state is not None:
            current = Usage(**state["usage"])
            opened = parse_rfc3339(state["start"])
            observed = parse_rfc3339(state["observed"])
            if now < observed:
                return events
            if now - observed > self.max_gap:
                events = self._close(current, opened, observed)
            elif usage == current:
                events = self._close(current, opened, now, whole_only=True)
                open_usage, start = current, opened + self.interval * len(events)
            else:
                events = self._close(current, opened, now)
        if open_usage is None and usage is not None:
            open_usage, start = usage, now
        with self.spool.transaction():
            for event in events:
                self.spool.append(METER_KIND, event, key=event["event_id"])
            self.spool.set_state(
                CURSOR_STATE,
                None
                if open_usage is None
                else {"usage": asdict(open_usage), "start": rfc3339(start), "observed": rfc3339(now)},
            )
        return events

    def _close(self, usage: Usage, start: datetime, end: datetime, *, whole_only: bool = False) -> list[dict[str, Any]]:
        """Events covering [start, end): whole intervals, then the remainder unless `whole_only`."""
        events = []
        while start + self.interval <= end:
            events.append(self._event(usage, start, start + self.interval))
            start += self.interval
        if not whole_only and start < end:
            events.append(self._event(usage, start, end))
        return events

    def _event(self, usage: Usage, start: datetime, end: datetime) -> dict[str, Any]:
        event = {
            "event_id": self.new_id(),
            "allocation_id": usage.allocation_id,
            "tenant_id": usage.tenant_id,
            "sku": usage.sku,
            "start": rfc3339(start),
            "end": rfc3339(end),
            "quantity": gpu_seconds(usage.gpus, start, end),
            "unit": "gpu_second",
        }
        grant = self.grant_for(usage, start, end)
        if grant:
            event["grant"] = grant
        return event


def pick_grant(grants: Any, usage: Usage, start: datetime, end: datetime) -> str | None:
    """The grant (from desired-state's `metering_grants`) for this allocation that covers
    [start, end), else the newest one of the allocation (the ledger then says why it refuses:
    better a visible rejection than usage silently never sent)."""
    mine = [
        g
        for g in grants or []
        if isinstance(g, dict)
        and isinstance(g.get("grant"), str)
        and str(g.get("allocation_id")) == usage.allocation_id
        and str(g.get("tenant_id")) == usage.tenant_id
    ]
    best: tuple[datetime, str] | None = None
    for g in mine:
        try:
            valid_from, valid_until = parse_rfc3339(str(g["valid_from"])), parse_rfc3339(str(g["valid_until"]))
        except (KeyError, ValueError):
            continue
        if valid_from <= start and end <= valid_until:
            return g["grant"]
        if best is None or valid_until > best[0]:
            best = (valid_until, g["grant"])
    return best[1] if best else (mine[0]["grant"] if mine else None)
