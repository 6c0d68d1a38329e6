"""The notification outbox: how anything leaves the building (docs/notifications.md).

    emit(topic="incident.trigger", dedup_key=f"incident:{pk}:trigger", payload={...}, audience="operators")

`emit` writes an event row and one delivery row per destination **in the caller's
transaction**: a change that rolls back leaves no event, a committed one always has its event,
and nothing is contacted while the transaction is open. The same `dedup_key` twice is one event
(a loop that sees the same happening every pass emits it once).

Where an event goes is decided by the apps: each registers a *router* (event → destinations:
channel kind and the id of its row) and the *channels* it owns (a kind and a function that
sends one delivery). Core knows no domain names: it stores, routes through the registry,
retries and logs.

The worker (`deliver_due`, the periodic task `core.tasks.deliver_notifications`) sends what is
due, each delivery claimed first so two workers never send it twice at once; every attempt is a
row of the delivery log. A failure is retried with exponential backoff (NOTIFY_BACKOFF_BASE_S,
doubling, at most NOTIFY_BACKOFF_CAP_S) until NOTIFY_MAX_ATTEMPTS, then the delivery is
*dead-lettered*; an operator may retry it (`retry_delivery`). A refusal that no retry can fix
(a removed endpoint, an address the guard refuses) is dead at once. A delivered one may be
replayed (`replay_delivery`): a new delivery of the same event, identical body.

Retention (`purge_expired`, the periodic task `core.tasks.purge_notifications`): an event whose
deliveries all went out is purged, with its deliveries and attempt log, NOTIFY_RETENTION_DAYS
after it was written and its last delivery; one with a dead-lettered delivery is kept for
NOTIFY_DEAD_RETENTION_DAYS (an operator's retry makes it pending, hence kept); a pending one never.
Batched, so a big table is never one DELETE; each pass is audited as counts.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from core.choices import DeliveryState
from core.errors import Conflict
from core.models import DeliveryAttempt, OutboxDelivery, OutboxEvent
from core.services.audit import record_audit, record_audit_about

logger = logging.getLogger(__name__)

CLAIM = timedelta(minutes=5)  # an attempt in flight holds its delivery this long (a killed worker's comes back)
DETAIL_MAX = 500


@dataclass(frozen=True)
class Sent:
    """What the destination answered to a successful attempt."""

    status_code: int | None = None
    detail: str = ""


class DeliveryFailed(Exception):
    """The attempt failed. `permanent`: no retry can succeed (dead-letter now)."""

    def __init__(self, detail: str, *, status_code: int | None = None, permanent: bool = False):
        super().__init__(detail)
        self.status_code = status_code
        self.permanent = permanent


@dataclass(frozen=True)
class Channel:
    kind: str
    send: Callable[[OutboxDelivery, OutboxEvent], Sent]
    describe: Callable[[str], str]  # target id → a name people recognise


_CHANNELS: dict[str, Channel] = {}
_ROUTERS: list[Callable[[OutboxEvent], Iterable[tuple[str, str]]]] = []


def register_channel(kind: str, send, describe=None) -> None:
    """An app's way out (called from its AppConfig.ready())."""
    _CHANNELS[kind] = Channel(kind, send, describe or (lambda target: f"{kind}:{target}"))


def register_router(router) -> None:
    """router(event) → [(channel kind, target id), ...]; every router sees every event."""
    if router not in _ROUTERS:
        _ROUTERS.append(router)


def channel_kinds() -> list[str]:
    return sorted(_CHANNELS)


def describe_target(delivery: OutboxDelivery) -> str:
    channel = _CHANNELS.get(delivery.channel)
    try:
        return channel.describe(delivery.target) if channel else f"{delivery.channel}:{delivery.target}"
    except Exception:  # a removed destination still has its log
        return f"{delivery.channel}:{delivery.target}"


def route(event: OutboxEvent) -> list[tuple[str, str]]:
    out: dict[tuple[str, str], None] = {}
    for router in _ROUTERS:
        for channel, target in router(event) or ():
            if channel in _CHANNELS:
                out[(channel, str(target))] = None
    return list(out)


def emit(
    *,
    topic: str,
    dedup_key: str,
    payload: dict,
    audience: str = "",
    subject: str = "",
    now: datetime | None = None,
) -> OutboxEvent | None:
    """Record the event and its deliveries in the current transaction; None when an event with
    this dedup key exists already (it was emitted before: nothing more is sent)."""
    now = now or timezone.now()
    if OutboxEvent.objects.filter(dedup_key=dedup_key[:200]).exists():
        return None
    try:
        with transaction.atomic():  # a savepoint: a concurrent twin's insert loses here, not the caller's transaction
            event = OutboxEvent.objects.create(
                topic=topic,
                dedup_key=dedup_key[:200],
                audience=audience,
                subject=subject[:200],
                payload=payload,
                created_at=now,
            )
            OutboxDelivery.objects.bulk_create(
                OutboxDelivery(
                    event=event, channel=channel, target=target, audience=audience, next_attempt_at=now, created_at=now
                )
                for channel, target in route(event)
            )
    except IntegrityError:
        return None  # emitted by another process at the same moment: one event
    return event


def backoff(attempts: int) -> timedelta:
    """Wait after the `attempts`-th failure: base, 2×base, 4×base … at most the cap."""
    base = settings.NOTIFY_BACKOFF_BASE_S
    return timedelta(seconds=min(base * 2 ** max(0, attempts - 1), settings.NOTIFY_BACKOFF_CAP_S))


def deliver_due(*, now: datetime | None = None, limit: int = 200) -> dict:
    """Send every delivery that is due (oldest first, at most `limit` a pass)."""
    now = now or timezone.now()
    due = list(
        OutboxDelivery.objects.filter(state=DeliveryState.PENDING, next_attempt_at__lte=now)
        .order_by("next_attempt_at", "id")
        .values_list("id", flat=True)[:limit]
    )
    counts = {"delivered": 0, "retrying": 0, "dead": 0}
    for delivery_id in due:
        outcome = attempt_delivery(delivery_id, now=now)
        if outcome:
            counts[outcome] += 1
    return counts


def attempt_delivery(delivery_id, *, now: datetime) -> str | None:
    """One attempt: claim, send (no transaction open while the destination answers), log."""
    claimed = OutboxDelivery.objects.filter(
        pk=delivery_id, state=DeliveryState.PENDING, next_attempt_at__lte=now
    ).update(next_attempt_at=now + CLAIM)
    if not claimed:
        return None  # another worker took it
    delivery = OutboxDelivery.objects.select_related("event").get(pk=delivery_id)
    channel = _CHANNELS.get(delivery.channel)
    started = time.perf_counter()
    try:
        if channel is None:
            raise DeliveryFailed(f"no channel of kind {delivery.channel!r} is registered", permanent=True)
        result, failure = channel.send(delivery, delivery.event), None
    except DeliveryFailed as exc:
        result, failure = None, exc
    except Exception as exc:  # network, TLS, SMTP: the destination is away, try again later
        result, failure = None, DeliveryFailed(f"{type(exc).__name__}: {exc}")
    elapsed_ms = int((time.perf_counter() - started) * 1000)
    return _record(delivery, result=result, failure=failure, now=now, elapsed_ms=elapsed_ms)


@transaction.atomic
def _record(delivery, *, result: Sent | None, failure: DeliveryFailed | None, now, elapsed_ms: int) -> str:
    attempts = delivery.attempts + 1
    if failure is None:
        DeliveryAttempt.objects.create(
            delivery=delivery,
            at=now,
            ok=True,
            status_code=result.status_code,
            detail=result.detail[:DETAIL_MAX],
            duration_ms=elapsed_ms,
        )
        OutboxDelivery.objects.filter(pk=delivery.pk).update(
            state=DeliveryState.DELIVERED, attempts=attempts, delivered_at=now, last_error=""
        )
        return "delivered"
    detail = str(failure)[:DETAIL_MAX]
    DeliveryAttempt.objects.create(
        delivery=delivery, at=now, ok=False, status_code=failure.status_code, detail=detail, duration_ms=elapsed_ms
    )
    dead = failure.permanent or attempts >= settings.NOTIFY_MAX_ATTEMPTS
    OutboxDelivery.objects.filter(pk=delivery.pk).update(
        state=DeliveryState.DEAD if dead else DeliveryState.PENDING,
        attempts=attempts,
        last_error=detail,
        next_attempt_at=now if dead else now + backoff(attempts),
    )
    if dead:
        logger.warning("delivery %s of %s dead-lettered: %s", delivery.pk, delivery.event.topic, detail)
    return "dead" if dead else "retrying"


class NotDead(Conflict):
    code = "delivery_not_dead"


class NotReplayable(Conflict):
    code = "delivery_not_replayable"


@transaction.atomic
def retry_delivery(delivery: OutboxDelivery, *, actor: str, now: datetime | None = None) -> OutboxDelivery:
    """An operator sends a dead-lettered delivery again: a fresh budget of attempts, due now."""
    now = now or timezone.now()
    delivery = OutboxDelivery.objects.select_for_update().get(pk=delivery.pk)
    if delivery.state != DeliveryState.DEAD:
        raise NotDead(f"Only a dead-lettered delivery is retried; this one is {delivery.get_state_display().lower()}.")
    before = {"state": delivery.state, "attempts": delivery.attempts}
    delivery.state, delivery.attempts, delivery.next_attempt_at = DeliveryState.PENDING, 0, now
    delivery.save(update_fields=["state", "attempts", "next_attempt_at"])
    record_audit(actor=actor, action="delivery.retry", target=delivery, before=before, after={"state": "pending"})
    return delivery


@transaction.atomic
def replay_delivery(delivery: OutboxDelivery, *, actor: str, now: datetime | None = None) -> OutboxDelivery:
    """Send an event again to the same destination: a new delivery, the same body (receivers
    de-duplicate on the event id)."""
    now = now or timezone.now()
    if delivery.state == DeliveryState.PENDING:
        raise NotReplayable("This delivery is still being attempted; replay it once it is delivered or dead.")
    replay = OutboxDelivery.objects.create(
        event_id=delivery.event_id,
        channel=delivery.channel,
        target=delivery.target,
        audience=delivery.audience,
        next_attempt_at=now,
        created_at=now,
        replay_of=delivery,
    )
    record_audit(actor=actor, action="delivery.replay", target=replay, after={"replay_of": str(delivery.pk)})
    return replay


PURGE_BATCH = 500  # events per DELETE round (their deliveries and attempts with them)
PURGE_MAX_BATCHES = 40  # per pass: a backlog is worked off over several passes, never one long one


def purgeable(now: datetime):
    """Events past retention: written before the window, nothing pending, no delivery made or
    delivered inside the window (a recent replay keeps its event), and a dead-lettered delivery
    only past the longer dead-letter retention."""
    kept = now - timedelta(days=settings.NOTIFY_RETENTION_DAYS)
    dead_kept = now - timedelta(days=settings.NOTIFY_DEAD_RETENTION_DAYS)
    deliveries = OutboxDelivery.objects.filter(event=OuterRef("pk"))
    return (
        OutboxEvent.objects.filter(created_at__lt=kept)
        .exclude(Exists(deliveries.filter(state=DeliveryState.PENDING)))
        .exclude(Exists(deliveries.filter(Q(created_at__gte=kept) | Q(delivered_at__gte=kept))))
        .exclude(Q(created_at__gte=dead_kept) & Exists(deliveries.filter(state=DeliveryState.DEAD)))
    )


def _delete_deliveries(event_ids: list) -> int:
    """Replays first, then what they replayed (leaves of the replay chains each round), so no row
    is ever left pointing at a deleted one."""
    deleted = 0
    rows = OutboxDelivery.objects.filter(event_id__in=event_ids)
    while True:
        leaves = rows.exclude(Exists(OutboxDelivery.objects.filter(replay_of=OuterRef("pk"))))
        count = leaves.delete()[0]
        deleted += count
        if not count:
            return deleted


def purge_expired(
    *, now: datetime | None = None, batch: int = PURGE_BATCH, max_batches: int = PURGE_MAX_BATCHES
) -> dict:
    """Delete what retention no longer keeps, oldest first, `batch` events per transaction."""
    now = now or timezone.now()
    counts = {"events": 0, "deliveries": 0, "attempts": 0}
    for _ in range(max_batches):
        with transaction.atomic():
            ids = list(purgeable(now).order_by("created_at", "id").values_list("pk", flat=True)[:batch])
            if not ids:
                break
            counts["attempts"] += DeliveryAttempt.objects.filter(delivery__event_id__in=ids).delete()[0]
            counts["deliveries"] += _delete_deliveries(ids)
            counts["events"] += OutboxEvent.objects.filter(pk__in=ids).delete()[0]
        if len(ids) < batch:
            break
    if counts["events"]:
        record_audit_about(
            actor="system:retention",
            action="outbox.purge",
            object_type=OutboxEvent._meta.label_lower,
            after={
                **counts,
                "retention_days": settings.NOTIFY_RETENTION_DAYS,
                "dead_retention_days": settings.NOTIFY_DEAD_RETENTION_DAYS,
            },
        )
    return counts
