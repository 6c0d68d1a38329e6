"""Agent tokens: `hga1.<node uuid>.<signature>`, HMAC-SHA256 with settings.AGENT_TOKEN_KEY.

They identify one node and are verified with the key alone — no database read — so the
ledger's meter ingest keeps working while the control-plane database is down.
"""
import base64
import hashlib
import hmac
import uuid

from django.conf import settings

PREFIX = "hga1"


def _signature(node_id: str) -> str:
    mac = hmac.new(settings.AGENT_TOKEN_KEY.encode(), f"{PREFIX}.{node_id}".encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac).rstrip(b"=").decode()


def mint_agent_token(node_id: uuid.UUID | str) -> str:
    node_id = str(uuid.UUID(str(node_id)))
    return f"{PREFIX}.{node_id}.{_signature(node_id)}"


def verify_agent_token(token: str) -> uuid.UUID | None:
    """The node id the token was minted for, or None when it is not a valid agent token."""
    parts = token.split(".")
    if len(parts) != 3 or parts[0] != PREFIX:
        return None
    try:
        node_id = uuid.UUID(parts[1])
    except ValueError:
        return None
    if not hmac.compare_digest(parts[2], _signature(str(node_id))):
        return None
    return node_id


def looks_like_agent_token(token: str) -> bool:
    return token.startswith(PREFIX + ".")
