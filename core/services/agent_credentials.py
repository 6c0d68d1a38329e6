"""Agent credentials: re-keying a node, revoking every token of a gone node, and the revocation
check every agent request makes.

The revocation list (core.models.AgentTokenRevocation) is kept in both databases and written
to both here: the meter ingest checks the ledger's copy, so it never needs the control-plane
database; the control-plane agent routes check theirs, so heartbeats never need the ledger.
Each node's entry is cached for settings.AGENT_REVOCATION_CACHE_SECONDS; a write replaces the
cached entry at once (in every process when the cache is shared, within that many seconds
otherwise).
"""

import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.core.cache import cache
from django.db import DatabaseError, transaction

from core.api.agent_tokens import AgentIdentity, mint_agent_token
from core.models import AgentTokenRevocation

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


def revocation_reason(identity: AgentIdentity, *, using: str = "default", cached=None) -> str | None:
    """Why this (validly signed) token no longer works, or None when it does. `using`: the
    database of the route asking ("ledger" for meter ingest). `cached`: the value already read
    from revocation_cache_key (anything but an entry, e.g. None for a miss, reads it here)."""
    entry = cached if isinstance(cached, _Entry) else _entry(identity.node_id, using)
    if entry.revoked_all:
        return f"every agent token of this node is revoked ({entry.reason})"
    if entry.not_before is not None and identity.issued_at < entry.not_before:
        return (
            f"this token was replaced: the node was re-keyed at {entry.not_before:%Y-%m-%d %H:%M:%S}Z; "
            "use the token printed by the latest manage.py create_token --agent HOSTNAME"
        )
    return None


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


class NodeRetired(Exception):
    """No token is issued for a retired or disposed node."""


def issue_agent_token(*, node, actor: str) -> str:
    """A new token for `node`; every token issued to it before is revoked from now on."""
    if node.lifecycle in ("retired", "disposed"):
        raise NodeRetired(f"{node.hostname} is {node.lifecycle}; its agent needs no token.")
    previous = AgentTokenRevocation.objects.using(LEDGER).filter(node_id=node.pk).first()
    issued_at = datetime.now(UTC)
    issued_at = issued_at.replace(microsecond=issued_at.microsecond // 1000 * 1000)  # tokens carry ms
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
