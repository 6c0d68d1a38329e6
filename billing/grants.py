"""Metering grants: "node N may meter allocation A of tenant T, SKU S, G GPUs, in [from, until)".

The control plane issues one per live allocation membership in desired-state; the ledger checks
it on every meter event. It is an HMAC-SHA256 under settings.METERING_GRANT_KEY, a key of the
ledger side (not SECRET_KEY, not AGENT_TOKEN_KEY), so ingest verifies it with the key alone and
keeps working while the control-plane database is down. A node's agent token says who is
calling; the grant says what that caller may bill. Neither alone is enough (docs/billing.md,
"Metering threat model").

Wire form: `hgm1.<base64url(compact JSON)>.<base64url(HMAC)>`; agents treat it as opaque.
"""

import base64
import hashlib
import hmac
import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from uuid import UUID

from django.conf import settings

PREFIX = "hgm1"
MAX_GRANT_CHARS = 1000


@dataclass(frozen=True)
class MeteringGrant:
    node_id: UUID
    tenant_id: UUID
    allocation_id: UUID
    sku: str
    gpus: int
    valid_from: datetime
    valid_until: datetime

    def covers(self, start: datetime, end: datetime, *, skew: timedelta = timedelta(0)) -> bool:
        return self.valid_from - skew <= start and end <= self.valid_until + skew


def key_id() -> str:
    """A short public name of the signing key, so a grant signed under another key says so."""
    return hashlib.sha256(b"hangar-metering-grant-key-id:" + settings.METERING_GRANT_KEY.encode()).hexdigest()[:8]


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _mac(body: str) -> str:
    return _b64(hmac.new(settings.METERING_GRANT_KEY.encode(), f"{PREFIX}.{body}".encode(), hashlib.sha256).digest())


def sign_grant(grant: MeteringGrant) -> str:
    claims = {
        "k": key_id(),
        "n": grant.node_id.hex,
        "t": grant.tenant_id.hex,
        "a": grant.allocation_id.hex,
        "s": grant.sku,
        "g": grant.gpus,
        "f": int(grant.valid_from.timestamp()),
        "u": int(grant.valid_until.timestamp()),
    }
    body = _b64(json.dumps(claims, separators=(",", ":"), sort_keys=True).encode())
    return f"{PREFIX}.{body}.{_mac(body)}"


class GrantInvalid(ValueError):
    """The grant is not one this ledger issued (or it is malformed); the message says which."""


def verify_grant(text) -> MeteringGrant:
    """The grant's claims, or GrantInvalid. No database read: the key is all it needs."""
    if not isinstance(text, str) or len(text) > MAX_GRANT_CHARS:
        raise GrantInvalid("not a metering grant (expected the opaque string from desired-state)")
    parts = text.split(".")
    if len(parts) != 3 or parts[0] != PREFIX:
        raise GrantInvalid("not a metering grant (expected the opaque string from desired-state)")
    if not hmac.compare_digest(parts[2], _mac(parts[1])):
        raise GrantInvalid("signature does not verify; fetch a fresh grant from desired-state")
    try:
        claims = json.loads(_unb64(parts[1]))
        grant = MeteringGrant(
            node_id=UUID(hex=claims["n"]),
            tenant_id=UUID(hex=claims["t"]),
            allocation_id=UUID(hex=claims["a"]),
            sku=str(claims["s"]),
            gpus=int(claims["g"]),
            valid_from=datetime.fromtimestamp(int(claims["f"]), UTC),
            valid_until=datetime.fromtimestamp(int(claims["u"]), UTC),
        )
    except (ValueError, KeyError, TypeError, OverflowError):
        raise GrantInvalid("signed but unreadable; fetch a fresh grant from desired-state") from None
    if claims.get("k") != key_id():
        raise GrantInvalid("signed under a retired key; fetch a fresh grant from desired-state")
    return grant


def grant_window(*, started_at: datetime, now: datetime) -> tuple[datetime, datetime]:
    """From the membership's start (to the second) to a few hours ahead, on a whole hour, so the
    grant an agent holds changes once an hour rather than on every poll."""
    valid_from = started_at.astimezone(UTC).replace(microsecond=0)
    hour = now.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    return valid_from, hour + timedelta(hours=settings.METERING_GRANT_HOURS + 1)
