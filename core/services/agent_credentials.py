"""Agent credentials: re-keying a node, rotating its identity at every tenancy boundary (with the
one-time handoff of the new identity), revoking every token of a gone node, and the revocation
check every agent request makes.

The revocation list (core.models.AgentTokenRevocation) is kept in both databases and written
to both here: the meter ingest checks the ledger's copy, so it never needs the control-plane
database; the control-plane agent routes check theirs, so heartbeats never need the ledger.
Each node's entry is cached for settings.AGENT_REVOCATION_CACHE_SECONDS; a write replaces the
cached entry at once (in every process when the cache is shared, within that many seconds
otherwise).
"""

import hashlib
import json
import logging
import os
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from django.conf import settings
from django.core.cache import cache
from django.db import DatabaseError, transaction

from core.api.agent_tokens import AgentIdentity, mint_agent_token
from core.models import AgentIdentityHandoff, AgentTokenRevocation, AuditEvent

from .audit import record_audit

log = logging.getLogger(__name__)
LEDGER = "ledger"
DATABASES = ("ledger", "default")  # the ledger first: ingest is where a stolen token bills
_STALE_FOR = 24 * 3600  # the last known entry, used only while the ledger cannot be read


@dataclass(frozen=True)
class _Entry:
    not_before: datetime | None
    revoked_all: bool
    reason: str


_NONE = _Entry(None, False, "")


def revocation_cache_key(node_id, using: str) -> str:
    """Where the node's entry is cached (the agent authenticator reads it in its throttle's round trip)."""
    return f"agent-revocation:{using}:{node_id}"


def _remember(node_id, entry: _Entry, using: str) -> None:
    cache.set(revocation_cache_key(node_id, using), entry, settings.AGENT_REVOCATION_CACHE_SECONDS)
    cache.set(revocation_cache_key(node_id, using) + ":stale", entry, _STALE_FOR)


def _entry(node_id, using: str) -> _Entry:
    cached = cache.get(revocation_cache_key(node_id, using))
    if cached is not None:
        return cached
    try:
        row = AgentTokenRevocation.objects.using(using).filter(node_id=node_id).first()
    except DatabaseError:
        # Rather the last entry seen than an error: this database being briefly unreadable must
        # not lock every agent out. An entry never seen means no revocation.
        log.warning("revocation list in %s unreadable; using the last known entry for node %s", using, node_id)
        return cache.get(revocation_cache_key(node_id, using) + ":stale") or _NONE
    entry = _NONE if row is None else _Entry(row.not_before, row.revoked_all, row.reason)
    _remember(node_id, entry, using)
    return entry


ROTATED = "tenancy boundary"  # the revocation reason of a rotation (the message says where the new identity is)


def revocation_reason(identity: AgentIdentity, *, using: str = "default", cached=None) -> str | None:
    """Why this (validly signed) token no longer works, or None when it does. `using`: the
    database of the route asking ("ledger" for meter ingest). `cached`: the value already read
    from revocation_cache_key (anything but an entry, e.g. None for a miss, reads it here)."""
    entry = cached if isinstance(cached, _Entry) else _entry(identity.node_id, using)
    if entry.revoked_all:
        return f"every agent token of this node is revoked ({entry.reason})"
    if entry.not_before is not None and identity.issued_at < entry.not_before:
        if entry.reason.startswith(ROTATED):
            return (
                f"this node's identity was rotated at {entry.not_before:%Y-%m-%d %H:%M:%S}Z, when its wipe began "
                "(a tenancy boundary); the node's wipe image claims the new one through the provisioning handoff"
            )
        return (
            f"this token was replaced: the node was re-keyed at {entry.not_before:%Y-%m-%d %H:%M:%S}Z; "
            "use the token printed by the latest manage.py create_token --agent HOSTNAME"
        )
    return None


REFUSAL_AUDIT_SECONDS = 3600  # one audit row per refused identity and route kind per hour, however hard it tries


def audit_refused_token(identity: AgentIdentity, reason: str, *, using: str, address: str = "") -> None:
    """Record that a revoked (but validly signed) agent token was presented: the first time per
    identity and database per hour, so a replaying node cannot fill the audit table. Never
    raises: the refusal stands whether or not its record could be written (the ledger route
    keeps working while the control-plane database is down)."""
    key = f"agent-refused-audit:{using}:{identity.node_id}:{int(identity.issued_at.timestamp() * 1000)}"
    try:
        if not cache.add(key, 1, REFUSAL_AUDIT_SECONDS):
            return
        AuditEvent.objects.using("default").create(
            at=datetime.now(UTC),
            actor=f"agent:{identity.node_id}",
            action="token.agent_refused",
            object_type="fleet.node",
            object_id=str(identity.node_id),
            after={
                "issued_at": identity.issued_at.isoformat(),
                "route": "meter ingest" if using == LEDGER else "control plane",
                "address": address,
            },
            reason=reason[:500],
        )
    except Exception:  # noqa: BLE001 — a record we could not write must not turn a 401 into a 500
        log.warning("could not audit a refused agent token of node %s", identity.node_id, exc_info=True)


def _write(node_id, **fields) -> None:
    """The same entry into both copies (each its own transaction; a failure raises, and the
    caller's retry writes both again: the write is idempotent)."""
    for using in DATABASES:
        with transaction.atomic(using=using):
            row = AgentTokenRevocation.objects.using(using).select_for_update().filter(node_id=node_id).first()
            if row is None:
                row = AgentTokenRevocation(node_id=node_id)
            for name, value in fields.items():
                setattr(row, name, value)
            row.updated_at = datetime.now(UTC)
            row.save(using=using)
        _remember(node_id, _Entry(row.not_before, row.revoked_all, row.reason), using)


def _millis_now() -> datetime:
    now = datetime.now(UTC)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)  # tokens carry milliseconds


def _write_many(node_ids: list, *, not_before: datetime, reason: str, usings=DATABASES) -> None:
    """One not_before for many nodes, in bulk (the reconciler rotates a batch)."""
    now = datetime.now(UTC)
    entry = _Entry(not_before, False, reason)
    for using in usings:
        with transaction.atomic(using=using):
            rows = {
                r.node_id: r
                for r in AgentTokenRevocation.objects.using(using).select_for_update().filter(node_id__in=node_ids)
            }
            for row in rows.values():
                row.not_before, row.revoked_all, row.reason, row.updated_at = not_before, False, reason, now
            AgentTokenRevocation.objects.using(using).bulk_update(
                rows.values(), ["not_before", "revoked_all", "reason", "updated_at"], batch_size=500
            )
            AgentTokenRevocation.objects.using(using).bulk_create(
                [
                    AgentTokenRevocation(node_id=n, not_before=not_before, reason=reason, updated_at=now)
                    for n in node_ids
                    if n not in rows
                ],
                batch_size=500,
            )
        if using == LEDGER or not transaction.get_connection(using).in_atomic_block:
            for node_id in node_ids:
                _remember(node_id, entry, using)
        else:
            # Forgotten now (this transaction's own reads see the new row), cached once it holds:
            # a rolled-back move caches no revocation, and an entry another process read meanwhile
            # is replaced on commit.
            cache.delete_many([revocation_cache_key(n, using) for n in node_ids])
            transaction.on_commit(lambda using=using: [_remember(n, entry, using) for n in node_ids], using=using)


# ---- rotation at a tenancy boundary, and the one-time handoff of the new identity ------------


def _digest(code: str) -> str:
    return hashlib.sha256(code.encode()).hexdigest()


def handoff_path(node_id) -> Path:
    """Where the provisioning channel's file for this node is published."""
    return Path(settings.AGENT_HANDOFF_DIR) / f"{node_id}.json"


def _publish(handoffs: dict) -> None:
    """Write each node's handoff file (0600, written whole then renamed into place): what the
    deployment's network-boot service serves to that node's wipe image, and nothing else reads."""
    directory = Path(settings.AGENT_HANDOFF_DIR)
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    for node_id, (code, issued_at) in handoffs.items():
        final = handoff_path(node_id)
        partial = final.with_suffix(".partial")
        body = json.dumps({"node_id": str(node_id), "code": code, "issued_at": issued_at.isoformat()})
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(body)
        os.replace(partial, final)


def _withdraw(node_id) -> None:
    try:
        handoff_path(node_id).unlink()
    except FileNotFoundError:
        pass


def rotate_node_identities(*, node_ids, actor: str, reason: str) -> int:
    """The identity change at a tenancy boundary: every token the nodes held stops working,
    and each node's next identity waits as a one-time handoff published on the provisioning
    channel. Written in the caller's transaction (the move into `wiping`, whose wipe the old
    identity must never see); once it commits, the cached entries are replaced, the ledger's
    copy is written (meter ingest) and the handoff files are published. Returns how many nodes
    were rotated."""
    node_ids = list(dict.fromkeys(node_ids))
    if not node_ids:
        return 0
    issued_at = _millis_now()
    latest = (
        AgentTokenRevocation.objects.using("default")
        .filter(node_id__in=node_ids, not_before__gte=issued_at)
        .order_by("-not_before")
        .values_list("not_before", flat=True)
        .first()
    )
    if latest is not None:  # two rotations in one millisecond: the second is strictly later
        issued_at = latest + timedelta(milliseconds=1)
    revocation = f"{ROTATED}: {reason}"[:200]
    _write_many(node_ids, not_before=issued_at, reason=revocation, usings=("default",))
    now = datetime.now(UTC)
    codes = {node_id: secrets.token_urlsafe(32) for node_id in node_ids}
    AgentIdentityHandoff.objects.filter(node_id__in=node_ids, claimed_at__isnull=True).update(expires_at=now)
    AgentIdentityHandoff.objects.bulk_create(
        [
            AgentIdentityHandoff(
                node_id=node_id,
                issued_at=issued_at,
                code_digest=_digest(code),
                reason=reason[:200],
                created_at=now,
                expires_at=now + timedelta(seconds=settings.AGENT_HANDOFF_TTL_SECONDS),
            )
            for node_id, code in codes.items()
        ],
        batch_size=500,
    )
    AuditEvent.objects.bulk_create(
        [
            AuditEvent(
                at=now,
                actor=actor,
                action="token.rotate_agent",
                object_type="fleet.node",
                object_id=str(node_id),
                after={"not_before": issued_at.isoformat(), "previous_tokens": "revoked", "handoff": "published"},
                reason=reason,
            )
            for node_id in node_ids
        ],
        batch_size=500,
    )
    published = {node_id: (code, issued_at) for node_id, code in codes.items()}

    # Published first: a ledger that cannot be written must not leave the node without a way back.
    transaction.on_commit(lambda: _publish(published), robust=True)
    # Meter ingest's copy. Should it fail, the old identity can still send usage under the grants
    # it holds (its own allocation's: contradicted by the allocation history and held as
    # disputed); every control-plane route already refuses it.
    transaction.on_commit(
        lambda: _write_many(node_ids, not_before=issued_at, reason=revocation, usings=(LEDGER,)), robust=True
    )
    return len(node_ids)


class HandoffRefused(Exception):
    """The claim does not open a waiting handoff (the message is the same whatever the reason)."""


def claim_identity_handoff(*, node_id, code: str, address: str = "") -> str:
    """The node's new agent token, once, for the one-time code of its latest handoff. A code
    presented again after it was claimed is a sign that someone else read the channel: refused
    and audited as `token.handoff_replayed`."""
    if not isinstance(code, str) or not 20 <= len(code) <= 128:
        raise HandoffRefused("not a handoff code")
    now = datetime.now(UTC)
    replayed = None
    with transaction.atomic():
        handoff = (
            AgentIdentityHandoff.objects.select_for_update().filter(code_digest=_digest(code), node_id=node_id).first()
        )
        if handoff is None:
            raise HandoffRefused("no such handoff")
        if handoff.claimed_at is not None:
            replayed = handoff
        elif handoff.expires_at <= now:
            raise HandoffRefused("expired")
        else:
            handoff.claimed_at, handoff.claimed_from = now, address[:64]
            handoff.save(update_fields=["claimed_at", "claimed_from"])
            AuditEvent.objects.create(
                at=now,
                actor=f"agent:{node_id}",
                action="token.handoff_claimed",
                object_type="fleet.node",
                object_id=str(node_id),
                after={"issued_at": handoff.issued_at.isoformat(), "address": address},
                reason=handoff.reason,
            )
            transaction.on_commit(lambda: _withdraw(node_id))
    if replayed is not None:  # recorded outside the refused claim's transaction, so it stays
        AuditEvent.objects.create(
            at=now,
            actor=f"address:{address}" if address else "anonymous",
            action="token.handoff_replayed",
            object_type="fleet.node",
            object_id=str(node_id),
            after={"claimed_at": replayed.claimed_at.isoformat(), "claimed_from": replayed.claimed_from},
            reason="a claimed identity handoff was presented again: someone else may have read the channel",
        )
        raise HandoffRefused("already claimed")
    return mint_agent_token(node_id, issued_at=handoff.issued_at)


class NodeRetired(Exception):
    """No token is issued for a retired or disposed node."""


def issue_agent_token(*, node, actor: str) -> str:
    """A new token for `node`; every token issued to it before is revoked from now on."""
    if node.lifecycle in ("retired", "disposed"):
        raise NodeRetired(f"{node.hostname} is {node.lifecycle}; its agent needs no token.")
    previous = AgentTokenRevocation.objects.using(LEDGER).filter(node_id=node.pk).first()
    issued_at = _millis_now()
    if previous is not None and previous.not_before is not None and issued_at <= previous.not_before:
        issued_at = previous.not_before + timedelta(milliseconds=1)  # two re-keys in one millisecond
    _write(node.pk, not_before=issued_at, revoked_all=False, reason="re-keyed")
    record_audit(
        actor=actor,
        action="token.rekey_agent",
        target=node,
        after={"issued_at": issued_at.isoformat(), "previous_tokens": "revoked"},
    )
    return mint_agent_token(node.pk, issued_at=issued_at)


def revoke_node_agent_tokens(*, node, actor: str, reason: str) -> None:
    """Every token of `node` stops working (it was retired or disposed)."""
    _write(node.pk, revoked_all=True, reason=reason[:200])
    record_audit(actor=actor, action="token.revoke_agent", target=node, reason=reason)
