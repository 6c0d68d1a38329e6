"""Agent tokens: `hga2.<node uuid>.<key id>.<issued at, ms>.<signature>`.

The signature is an HMAC-SHA256 under settings.AGENT_TOKEN_KEY (never SECRET_KEY). A token is
verified with the key alone (no database read), so the ledger's meter ingest keeps working while
the control-plane database is down. The key id names the key that signed it (a token of a
rotated key says so instead of looking forged); the issue time lets a node be re-keyed: the
revocation list (core.services.agent_credentials) holds, per node, the earliest issue time still
valid. Tokens of the older `hga1` form carried neither and are no longer accepted.
"""

import base64
import hashlib
import hmac
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

from django.conf import settings

PREFIX = "hga2"
MAX_TOKEN_CHARS = 200


@dataclass(frozen=True)
class AgentIdentity:
    node_id: uuid.UUID
    key_id: str
    issued_at: datetime


def agent_key_id() -> str:
    return hashlib.sha256(b"hangar-agent-token-key-id:" + settings.AGENT_TOKEN_KEY.encode()).hexdigest()[:8]


def _signature(message: str) -> str:
    mac = hmac.new(settings.AGENT_TOKEN_KEY.encode(), message.encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac).rstrip(b"=").decode()


def _millis(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def mint_agent_token(node_id: uuid.UUID | str, *, issued_at: datetime | None = None) -> str:
    """A token for the node, signed now. Minting alone revokes nothing: to re-key a node (and
    revoke its earlier tokens) use core.services.agent_credentials.issue_agent_token."""
    node_id = str(uuid.UUID(str(node_id)))
    message = f"{PREFIX}.{node_id}.{agent_key_id()}.{_millis(issued_at or datetime.now(UTC))}"
    return f"{message}.{_signature(message)}"


def verify_agent_token(token: str) -> AgentIdentity | None:
    """Who the token was minted for and when, or None when it is not a valid agent token
    (revocation is checked separately, see core.services.agent_credentials)."""
    if not isinstance(token, str) or len(token) > MAX_TOKEN_CHARS:
        return None
    parts = token.split(".")
    if len(parts) != 5 or parts[0] != PREFIX or parts[2] != agent_key_id() or not parts[3].isdigit():
        return None
    try:
        node_id = uuid.UUID(parts[1])
        issued_at = datetime.fromtimestamp(int(parts[3]) / 1000, UTC)
    except (ValueError, OverflowError, OSError):
        return None
    if not hmac.compare_digest(parts[4], _signature(".".join(parts[:4]))):
        return None
    return AgentIdentity(node_id=node_id, key_id=parts[2], issued_at=issued_at)


def looks_like_agent_token(token: str) -> bool:
    return token.startswith(("hga1.", PREFIX + "."))
