"""Meter-event ingest: validate a batch, check each event against its grant, dedupe by event
id, bound each interval by what the node's GPUs could deliver, insert in one statement.

Writes only to the ledger database (never reads or writes `default`), so node agents keep
metering while the control plane is down. A malformed event refuses the whole batch (400); a
well-formed event its grant does not allow is refused alone: listed in the answer's `rejected`
with a code, never charged, counted per node, hour and code (RejectedMeterTally) and kept as a
row for operators up to a budget per node and hour (RejectedMeterEvent). Re-sending an event is
a counted duplicate; the same event id with different content from the same node is a conflict
and the whole batch is refused; an event id another node already recorded is refused alone.

Interval bound: each event is bounded by its grant (GPUs × its own seconds), and the events of
one node together by the node (at no instant more GPUs in use than the grant's GPU count): usage
is taken as spread evenly over its `[start, end)`, and an event whose share, added to what is
already recorded for the same node over any part of its interval, would exceed the GPU count is
refused (`exceeds_interval_capacity`). So however many events name the same minute, the node is
billed at most GPUs × the wall-clock length of the union of their intervals.
"""

import bisect
import hashlib
import json
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from uuid import UUID

from django.conf import settings
from django.db import connections, transaction

from billing.grants import GrantInvalid, verify_grant
from billing.models import (
    MICRO,
    PriceBookEntry,
    RejectedMeterEvent,
    RejectedMeterTally,
    RejectionCode,
    Unit,
    UsageDispute,
    UsageEvent,
)
from billing.periods import next_period, period_end, period_of
from billing.services.ledger_partitions import ensure_partitions_for
from core import clock
from core.api.timestamps import parse_rfc3339
from core.locks import lock_id

MAX_BATCH = 1000
# A quantity is a decimal string of GPU-seconds: at most this many characters (a 5,000-digit
# number or an exponent of a billion never reaches the arithmetic) and at most MAX_QUANTITY.
MAX_QUANTITY_CHARS = 32
MAX_QUANTITY = Decimal(10) ** 12  # GPU-seconds: 72 GPUs for 400 years; the column holds 9.2e12
# Intervals of one node overlapping one new event beyond this are refused without weighing them.
MAX_OVERLAPPING = 64
FIELDS = ("event_id", "allocation_id", "tenant_id", "sku", "start", "end", "quantity", "unit")
LEDGER = "ledger"
_US = datetime.resolution  # one microsecond


class IngestValidationError(Exception):
    def __init__(self, errors: list[dict]):
        super().__init__("invalid meter events")
        self.errors = errors


class EventConflict(Exception):
    def __init__(self, event_ids: list[str]):
        super().__init__("event ids re-sent with different content")
        self.event_ids = event_ids


@dataclass(frozen=True)
class Rejection:
    event_id: str
    code: str
    detail: str


@dataclass(frozen=True)
class IngestResult:
    accepted: int
    duplicates: int
    rejected: tuple[Rejection, ...] = ()


@dataclass(frozen=True)
class _Event:
    event_id: str
    allocation_id: UUID
    tenant_id: UUID
    sku: str
    start: datetime
    end: datetime
    quantity_micro: int
    payload_hash: str
    grant: object  # the grant as sent (any JSON value; checked by _refusal)


def _quantity_micro(value) -> int:
    if not isinstance(value, str):
        raise ValueError('must be a decimal string, e.g. "480" (GPUs × seconds)')
    if len(value) > MAX_QUANTITY_CHARS:
        raise ValueError(f'at most {MAX_QUANTITY_CHARS} characters (a decimal of GPU-seconds, e.g. "480")')
    try:
        quantity = Decimal(value)
    except InvalidOperation:
        raise ValueError('must be a decimal string, e.g. "480"') from None
    if not quantity.is_finite() or quantity < 0:
        raise ValueError("must be a finite decimal ≥ 0")
    if quantity > MAX_QUANTITY:
        raise ValueError(f"at most {MAX_QUANTITY:,f} GPU-seconds per event")
    micro = quantity * MICRO
    if micro != micro.to_integral_value():
        raise ValueError("at most 6 decimal places (microsecond resolution)")
    return int(micro)


def _validate(index: int, raw, known_skus: set[str], errors: list[dict]) -> _Event | None:
    prefix = f"events[{index}]"
    if not isinstance(raw, dict):
        errors.append({"field": prefix, "message": "must be an object"})
        return None
    before = len(errors)

    def bad(field: str, message: str) -> None:
        errors.append({"field": f"{prefix}.{field}", "message": message})

    for name in FIELDS:
        if name not in raw or raw[name] in (None, ""):
            bad(name, "this field is required")
    if len(errors) > before:
        return None
    event_id = raw["event_id"]
    if not isinstance(event_id, str) or len(event_id) > 100:
        bad("event_id", "must be a string of at most 100 characters")
    ids = {}
    for name in ("allocation_id", "tenant_id"):
        try:
            ids[name] = UUID(str(raw[name]))
        except ValueError:
            bad(name, "must be a UUID")
    if not isinstance(raw["sku"], str) or raw["sku"] not in known_skus:
        bad("sku", f"unknown instance type; one of: {', '.join(sorted(known_skus))}")
    times = {}
    for name in ("start", "end"):
        try:
            times[name] = parse_rfc3339(raw[name])
        except (ValueError, TypeError) as exc:
            bad(name, str(exc))
    if len(times) == 2 and times["end"] <= times["start"]:
        bad("end", "must be after start ([start, end) is a non-empty interval)")
    try:
        micro = _quantity_micro(raw["quantity"])
    except ValueError as exc:
        bad("quantity", str(exc))
    if raw["unit"] != Unit.GPU_SECOND:
        bad("unit", "must be gpu_second")
    if len(errors) > before:
        return None
    # Hash the normalised content, so "480" and "480.000" or "+00:00" and "Z" are the same event.
    # Length-prefixing the free-form event id keeps the encoding unambiguous.
    canonical = (
        f"{len(event_id)}:{event_id}|{ids['allocation_id']}|{ids['tenant_id']}|{raw['sku']}|"
        f"{times['start'].isoformat()}|{times['end'].isoformat()}|{micro}|{Unit.GPU_SECOND.value}"
    )
    return _Event(
        event_id,
        ids["allocation_id"],
        ids["tenant_id"],
        raw["sku"],
        times["start"],
        times["end"],
        micro,
        hashlib.sha256(canonical.encode()).hexdigest(),
        raw.get("grant"),
    )


def _seconds(delta: timedelta) -> str:
    return f"{delta.total_seconds():g} s"


def _refusal(event: _Event, node_id: UUID, now: datetime, verified: dict) -> tuple[str, str] | None:
    """(code, detail) when the event's grant does not allow charging it, else None.

    Checked with the signing key alone (no control-plane read). `verified` caches grant
    verification per batch: an agent sends one grant for a whole batch of an allocation."""
    if event.grant in (None, ""):
        return (
            RejectionCode.GRANT_MISSING,
            "no grant; attach the metering grant desired-state lists for this allocation",
        )
    key = event.grant if isinstance(event.grant, str) else repr(event.grant)
    if key not in verified:
        try:
            verified[key] = verify_grant(event.grant)
        except GrantInvalid as exc:
            verified[key] = exc
    grant = verified[key]
    if isinstance(grant, GrantInvalid):
        return RejectionCode.GRANT_INVALID, f"grant {grant}"
    skew = timedelta(seconds=settings.METER_CLOCK_SKEW_SECONDS)
    max_age = timedelta(hours=settings.METER_MAX_EVENT_AGE_HOURS)
    if grant.valid_until + max_age < now:
        return RejectionCode.GRANT_INVALID, (
            f"grant expired at {grant.valid_until.isoformat()}; usage is accepted up "
            f"to {settings.METER_MAX_EVENT_AGE_HOURS} h after its grant ends"
        )
    mismatches = [
        name
        for name, sent, granted in (
            ("node", node_id, grant.node_id),
            ("tenant", event.tenant_id, grant.tenant_id),
            ("allocation", event.allocation_id, grant.allocation_id),
            ("sku", event.sku, grant.sku),
        )
        if sent != granted
    ]
    if mismatches:
        return RejectionCode.OUTSIDE_GRANT, (
            f"the grant is for another {', '.join(mismatches)} (node {grant.node_id}, "
            f"allocation {grant.allocation_id}); use this node's grant for the event's "
            "allocation"
        )
    if not grant.covers(event.start, event.end, skew=skew):
        return RejectionCode.OUTSIDE_GRANT, (
            f"[start, end) is outside the grant's window {grant.valid_from.isoformat()}"
            f" – {grant.valid_until.isoformat()}; fetch the renewed grant"
        )
    if event.end > now + skew:
        return RejectionCode.OUTSIDE_GRANT, (
            f"ends {_seconds(event.end - now)} after the ledger's clock (at most "
            f"{settings.METER_CLOCK_SKEW_SECONDS} s ahead); check the node's clock"
        )
    if event.end < now - max_age:
        return RejectionCode.OUTSIDE_GRANT, (
            f"ended more than {settings.METER_MAX_EVENT_AGE_HOURS} h ago; too old to bill automatically"
        )
    cap = grant.gpus * ((event.end - event.start) // _US)  # GPU-microseconds
    if event.quantity_micro > cap:
        return RejectionCode.QUANTITY_EXCEEDS_GRANT, (
            f"quantity {Decimal(event.quantity_micro) / MICRO} is more than "
            f"{grant.gpus} GPUs × {_seconds(event.end - event.start)} = "
            f"{Decimal(cap) / MICRO} GPU-seconds"
        )
    return None


def _hour(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


def _store_rejections(node_id: UUID, refused: list[tuple[_Event, str, str]], received_at: datetime) -> None:
    """Count every refusal (per node, hour and code) and keep the first ones of each node and
    hour as rows, up to METER_REJECTED_SAMPLE_PER_NODE_HOUR; re-sending the same refused event
    stores it once. The rest leave their count, their claimed GPU-seconds and the last event id
    in the hour's tally, so a flood of invalid events costs the ledger a few rows an hour."""
    hour = _hour(received_at)
    tallies = {
        t.code: t
        for t in RejectedMeterTally.objects.using(LEDGER).select_for_update().filter(node_id=node_id, hour=hour)
    }
    room = max(0, settings.METER_REJECTED_SAMPLE_PER_NODE_HOUR - sum(t.sampled for t in tallies.values()))
    kept = refused[:room]
    if kept:
        RejectedMeterEvent.objects.using(LEDGER).bulk_create(
            [
                RejectedMeterEvent(
                    event_id=e.event_id,
                    node_id=node_id,
                    tenant_id=e.tenant_id,
                    allocation_id=e.allocation_id,
                    sku=e.sku,
                    start=e.start,
                    end=e.end,
                    quantity_micro=e.quantity_micro,
                    code=code,
                    detail=detail[:500],
                    grant=e.grant if isinstance(e.grant, str) else repr(e.grant)[:1000],
                    payload_hash=e.payload_hash,
                    received_at=received_at,
                )
                for e, code, detail in kept
            ],
            ignore_conflicts=True,
            batch_size=500,
        )
    counts: dict = defaultdict(lambda: [0, 0, 0, ""])  # code → [refused, sampled, GPU-µs, last event id]
    for index, (event, code, _detail) in enumerate(refused):
        count = counts[code]
        count[0] += 1
        count[1] += index < len(kept)
        count[2] += event.quantity_micro
        count[3] = event.event_id
    changed, created = [], []
    for code, (n, sampled, micro, last_id) in counts.items():
        tally = tallies.get(code)
        if tally is None:
            created.append(
                RejectedMeterTally(
                    node_id=node_id,
                    hour=hour,
                    code=code,
                    refused=n,
                    sampled=sampled,
                    quantity_micro=micro,
                    first_received_at=received_at,
                    last_received_at=received_at,
                    last_event_id=last_id,
                )
            )
            continue
        tally.refused += n
        tally.sampled += sampled
        tally.quantity_micro += micro
        tally.last_received_at, tally.last_event_id = received_at, last_id
        changed.append(tally)
    RejectedMeterTally.objects.using(LEDGER).bulk_update(
        changed, ["refused", "sampled", "quantity_micro", "last_received_at", "last_event_id"]
    )
    RejectedMeterTally.objects.using(LEDGER).bulk_create(created)


# ---- the per-interval bound -------------------------------------------------------------------


@dataclass(frozen=True)
class _Span:
    start: datetime
    end: datetime
    quantity_micro: int

    @property
    def density(self) -> Fraction:
        """GPUs in use: the quantity spread evenly over [start, end) (exact, as a fraction)."""
        return Fraction(self.quantity_micro, (self.end - self.start) // _US)


def _span(start: datetime, end: datetime, quantity_micro: int) -> _Span:
    return _Span(start, end, quantity_micro)


class _NodeUsage:
    """What a node is already billed for, as spans, to weigh a new event against."""

    def __init__(self, spans: list[_Span]):
        self.spans = sorted(spans, key=lambda s: s.start)
        self.starts = [s.start for s in self.spans]
        self.longest = max((s.end - s.start for s in self.spans), default=timedelta(0))

    def overlapping(self, start: datetime, end: datetime) -> list[_Span]:
        lo = bisect.bisect_left(self.starts, start - self.longest)
        hi = bisect.bisect_left(self.starts, end)
        return [s for s in self.spans[lo:hi] if s.end > start]

    def add(self, span: _Span) -> None:
        at = bisect.bisect_right(self.starts, span.start)
        self.starts.insert(at, span.start)
        self.spans.insert(at, span)
        self.longest = max(self.longest, span.end - span.start)

    def peak(self, new: _Span, others: list[_Span]) -> Fraction:
        """The most GPUs in use at any instant of `new`'s interval, with it counted."""
        cuts = sorted({new.start, new.end, *(t for o in others for t in (o.start, o.end) if new.start < t < new.end)})
        peak = Fraction(0)
        for lo in cuts[:-1]:
            peak = max(peak, new.density + sum((o.density for o in others if o.start <= lo < o.end), Fraction(0)))
        return peak


def _recorded_usage(node_id: UUID, events: list[_Event], exclude: set[str]) -> _NodeUsage:
    """The node's recorded events that end after the first of `events` starts and start before
    the last ends, whole (pieces of one event summed), less the batch's own ids (a re-sent event
    is a duplicate, not an overlap). One query."""
    first = min(e.start for e in events)
    last = max(e.end for e in events)
    rows = (
        UsageEvent.objects.using(LEDGER)
        .filter(
            node_id=node_id,
            # a piece lies inside its month, so only these months' partitions can hold overlaps
            period__gte=period_of(first),
            period__lte=period_of(last),
            end__gt=first,
            start__lt=last,
            quantity_micro__gt=0,
        )
        .values_list("event_id", "start", "end", "quantity_micro")
    )
    whole: dict = {}
    for event_id, start, end, micro in rows:
        if event_id in exclude:
            continue
        seen = whole.get(event_id)
        whole[event_id] = (
            (start, end, micro) if seen is None else (min(seen[0], start), max(seen[1], end), seen[2] + micro)
        )
    return _NodeUsage([_span(*v) for v in whole.values()])


def _over_capacity(node_id: UUID, events: list[_Event], exclude: set[str], gpus_of) -> dict[str, str]:
    """event id → why, for the events (in the batch's order) that would put more GPUs in use
    at some instant than their grant's GPU count, with what is recorded and what this batch
    accepted before them."""
    if not events:
        return {}
    usage = _recorded_usage(node_id, events, exclude)
    refused = {}
    for event in events:
        if event.quantity_micro == 0:
            continue
        gpus = gpus_of(event)
        span = _span(event.start, event.end, event.quantity_micro)
        others = usage.overlapping(event.start, event.end)
        if not others:  # alone on its interval: its grant's bound (checked already) is the node's
            usage.add(span)
            continue
        if len(others) > MAX_OVERLAPPING:
            refused[event.event_id] = (
                f"{len(others)} other events of this node overlap [start, end); at most {MAX_OVERLAPPING} are weighed"
            )
            continue
        peak = usage.peak(span, others)
        if peak > gpus:
            already = sum((o.density * ((min(o.end, event.end) - max(o.start, event.start)) // _US) for o in others), 0)
            refused[event.event_id] = (
                f"with the {len(others)} event(s) already recorded for this node over [start, end) "
                f"({Decimal(int(already)) / MICRO} GPU-seconds), it would bill up to {float(peak):g} GPUs at once; "
                f"the node has {gpus}. Each second of a node is billed once"
            )
            continue
        usage.add(span)
    return refused


def _pieces(event: _Event) -> list[tuple[datetime, datetime, int]]:
    """[start, end) split at month boundaries; quantity apportioned by time, remainder on the
    last piece so the pieces sum exactly to what the agent sent."""
    bounds = [event.start]
    boundary = period_end(period_of(event.start))
    while boundary < event.end:
        bounds.append(boundary)
        boundary = period_end(next_period(period_of(boundary)))
    bounds.append(event.end)
    if len(bounds) == 2:
        return [(event.start, event.end, event.quantity_micro)]
    total_us = (event.end - event.start) // _US
    pieces, assigned = [], 0
    for i, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
        share = (
            event.quantity_micro - assigned
            if i == len(bounds) - 2
            else event.quantity_micro * ((hi - lo) // _US) // total_us
        )
        assigned += share
        pieces.append((lo, hi, share))
    return pieces


def known_skus() -> set[str]:
    """Instance types a meter event may name: the price book's SKUs less its energy price (kWh
    are rated from the control plane's energy counters, never metered)."""
    return set(PriceBookEntry.objects.using(LEDGER).exclude(unit=Unit.KWH).values_list("sku", flat=True).distinct())


_COLUMNS = (
    "event_id",
    "part",
    "tenant_id",
    "allocation_id",
    "node_id",
    "sku",
    "start",
    "end",
    "period",
    "quantity_micro",
    "unit",
    "payload_hash",
    "received_at",
)
_COLUMN_LIST = ", ".join(f'"{c}"' for c in _COLUMNS)
_ROW_PLACEHOLDERS = f"({', '.join(['%s'] * len(_COLUMNS))})"


# PostgreSQL: the rows travel as one JSON document expanded by the server. The statement text
# stays small and fixed, so the driver neither rewrites a 13,000-placeholder query per batch (that
# rewrite was three quarters of the endpoint's time) nor adapts 13,000 values one by one.
_PG_INSERT = (
    f"INSERT INTO billing_usageevent ({_COLUMN_LIST}) "
    "SELECT r->>0, (r->>1)::smallint, (r->>2)::uuid, (r->>3)::uuid, %s::uuid, r->>4, "
    "(r->>5)::timestamptz, (r->>6)::timestamptz, (r->>7)::date, (r->>8)::bigint, %s, r->>9, "
    "%s::timestamptz FROM json_array_elements(%s::json) AS r ON CONFLICT (event_id, part, period) DO NOTHING"
)


def _insert(rows: list[tuple]) -> None:
    """Insert ... ON CONFLICT DO NOTHING (a concurrent retry of the same batch never fails or
    double-charges). Raw SQL because bulk_create's per-value preparation was two thirds of the
    endpoint's time and executemany is a round trip per row on PostgreSQL
    (benchmarks/bench_billing.py); values are adapted here the way Django stores them."""
    connection = connections[LEDGER]
    if not rows:
        return
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            first = rows[0]  # node, unit and received_at are the same for the whole batch
            document = json.dumps(
                [
                    [
                        r[0],
                        r[1],
                        str(r[2]),
                        str(r[3]),
                        r[5],
                        r[6].isoformat(),
                        r[7].isoformat(),
                        r[8].isoformat(),
                        r[9],
                        r[11],
                    ]
                    for r in rows
                ]
            )
            cursor.execute(_PG_INSERT, [first[4], first[10], first[12], document])
        return
    if connection.vendor == "sqlite":
        # Django's SQLite format: naive UTC "YYYY-MM-DD HH:MM:SS[.ffffff]", UUIDs as 32 hex digits.
        text = lambda moment: moment.replace(tzinfo=None).isoformat(" ")  # noqa: E731 (all values are UTC here)
        rows = [
            (
                r[0],
                r[1],
                r[2].hex,
                r[3].hex,
                r[4].hex,
                r[5],
                text(r[6]),
                text(r[7]),
                r[8].isoformat(),
                r[9],
                r[10],
                r[11],
                text(r[12]),
            )
            for r in rows
        ]
    per_statement = max(1, connection.ops.bulk_batch_size(_COLUMNS, rows))
    with connection.cursor() as cursor:
        for lo in range(0, len(rows), per_statement):
            chunk = rows[lo : lo + per_statement]
            cursor.execute(
                f"INSERT INTO billing_usageevent ({_COLUMN_LIST}) VALUES "
                f"{', '.join([_ROW_PLACEHOLDERS] * len(chunk))} ON CONFLICT (event_id, part, period) DO NOTHING",
                [value for row in chunk for value in row],
            )


def _serialise_node(node_id: UUID) -> None:
    """One node's batches are stored one at a time (PostgreSQL; SQLite has one writer anyway).

    The ledger's unique key includes the month (a partitioned table's must), so two batches
    re-sending one event id with different starts could each pass the lookup below and land in
    two months. An event can only come from the node its grant names, so holding a lock per node
    for the transaction closes that race without making different nodes wait for each other."""
    connection = connections[LEDGER]
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_advisory_xact_lock(%s::int, hashtext(%s))",
                [lock_id("meter_ingest_node") >> 32, str(node_id)],
            )


def _stored(event_ids: list[str]) -> dict[str, tuple[str, UUID]]:
    """event id → (payload hash, node) of the ids already recorded (one query)."""
    connection = connections[LEDGER]
    if connection.vendor == "postgresql":
        # One array parameter rather than 1,000 placeholders (same reason as _PG_INSERT), joined
        # rather than `= ANY(...)`: with the ledger partitioned by month, ANY made the planner
        # seq-scan every month (268 ms a batch at 1.2 M rows); the join probes each month's
        # unique index once per id (25 ms).
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT u.event_id, u.payload_hash, u.node_id FROM unnest(%s::varchar[]) AS k(event_id) "
                "JOIN billing_usageevent u ON u.event_id = k.event_id AND u.part = 0",
                [event_ids],
            )
            return {eid: (digest, node if isinstance(node, UUID) else UUID(str(node))) for eid, digest, node in cursor}
    return {
        eid: (digest, node)
        for eid, digest, node in UsageEvent.objects.using(LEDGER)
        .filter(event_id__in=event_ids, part=0)
        .values_list("event_id", "payload_hash", "node_id")
    }


def ingest_meter_events(*, node_id: UUID, events: list, received_at: datetime | None = None) -> IngestResult:
    """Validate and store one agent batch; raises IngestValidationError or EventConflict.

    `node_id` is the calling agent's (from its token); `received_at` is the ledger's clock."""
    if not isinstance(events, list) or not 1 <= len(events) <= MAX_BATCH:
        raise IngestValidationError([{"field": "events", "message": f"send a list of 1 to {MAX_BATCH} events"}])
    skus = known_skus()
    errors: list[dict] = []
    parsed = [_validate(i, raw, skus, errors) for i, raw in enumerate(events)]
    if errors:
        raise IngestValidationError(errors)
    received_at = received_at or clock.now()
    verified: dict = {}
    refused: list[tuple[_Event, str, str]] = []
    allowed: list[_Event] = []
    for event in parsed:
        refusal = _refusal(event, node_id, received_at, verified)
        if refusal is None:
            allowed.append(event)
        else:
            refused.append((event, *refusal))
    by_id: dict[str, _Event] = {}
    conflicts: set[str] = set()
    in_batch_duplicates = 0
    for event in allowed:
        seen = by_id.get(event.event_id)
        if seen is None:
            by_id[event.event_id] = event
        elif seen.payload_hash == event.payload_hash:
            in_batch_duplicates += 1
        else:
            conflicts.add(event.event_id)
    pieces = {e.event_id: _pieces(e) for e in by_id.values()}
    ensure_partitions_for({period_of(lo) for parts in pieces.values() for lo, _, _ in parts})

    def grant_of(event: _Event):
        return verified[event.grant if isinstance(event.grant, str) else repr(event.grant)]

    with transaction.atomic(using=LEDGER):
        _serialise_node(node_id)
        stored = _stored(list(by_id)) if by_id else {}
        # Another node's event id is that node's: refused alone, never a reason to refuse the
        # rest of this batch (nor counted as this node's duplicate).
        foreign = {eid for eid, (_digest, owner) in stored.items() if owner != node_id}
        for eid in foreign:
            refused.append(
                (by_id.pop(eid), RejectionCode.EVENT_ID_IN_USE, "another node recorded this event id; use a new id")
            )
            del stored[eid]
        conflicts.update(eid for eid, (digest, _owner) in stored.items() if by_id[eid].payload_hash != digest)
        if conflicts:
            raise EventConflict(sorted(conflicts))
        new = [e for e in by_id.values() if e.event_id not in stored]
        over = _over_capacity(node_id, new, set(by_id), lambda e: grant_of(e).gpus)
        for event in new:
            if event.event_id in over:
                refused.append((by_id.pop(event.event_id), RejectionCode.EXCEEDS_INTERVAL, over[event.event_id]))
        new = [e for e in new if e.event_id not in over]
        rows = [
            (
                e.event_id,
                part,
                e.tenant_id,
                e.allocation_id,
                node_id,
                e.sku,
                lo,
                hi,
                period_of(lo),
                share,
                Unit.GPU_SECOND,
                e.payload_hash,
                received_at,
            )
            for e in new
            for part, (lo, hi, share) in enumerate(pieces[e.event_id])
        ]
        _insert(rows)
        _hold_early_usage(new, grant_of, received_at)
        if refused:
            _store_rejections(node_id, refused, received_at)
    return IngestResult(
        accepted=len(new),
        duplicates=len(stored) + in_batch_duplicates,
        rejected=tuple(Rejection(e.event_id, str(code), detail) for e, code, detail in refused),
    )


def _hold_early_usage(events: list[_Event], grant_of, received_at: datetime) -> int:
    """Usage that starts before its grant's window (the node's membership in the allocation) but
    within the clock-skew allowance is stored and held as disputed at once, never rated until
    an operator accepts it: an agent's clock may run early, and a tenant may not be billed for
    time before its allocation started."""
    early = {e.event_id: grant_of(e) for e in events if e.start < grant_of(e).valid_from}
    if not early:
        return 0
    rows = (
        UsageEvent.objects.using(LEDGER)
        .filter(event_id__in=list(early))
        .values_list("id", "event_id", "tenant_id", "period", "start")
    )
    UsageDispute.objects.using(LEDGER).bulk_create(
        [
            UsageDispute(
                usage_event_id=pk,
                tenant_id=tenant_id,
                period=period,
                reason=(
                    f"starts {_seconds(early[event_id].valid_from - start)} before this node joined the allocation "
                    f"({early[event_id].valid_from.isoformat()}); held until an operator accepts it"
                )
                if start < early[event_id].valid_from
                else f"part of an event that starts before this node joined the allocation "
                f"({early[event_id].valid_from.isoformat()}); held until an operator accepts it",
                opened_at=received_at,
            )
            for pk, event_id, tenant_id, period, start in rows
        ],
        ignore_conflicts=True,
    )
    return len(early)
