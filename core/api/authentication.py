"""Bearer-token authentication for the three kinds of principal (docs/api.md, "Auth").

`request.user` becomes a `Principal`. Tenant and operator tokens are looked up by the SHA-256
of their value; agent tokens are verified by signature, then against the revocation list
(cached, in the ledger database: core.services.agent_credentials).
"""

import hashlib
import secrets
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any
from uuid import UUID

from django.db.models import Q
from django.utils import timezone
from rest_framework import authentication, exceptions

from core.choices import ApiTokenKind, TenantRole
from core.models import ApiToken
from core.services.agent_credentials import audit_refused_token, revocation_cache_key, revocation_reason

from .agent_tokens import looks_like_agent_token, verify_agent_token
from .throttles import (
    UNREAD,
    client_address,
    guarded_authentication,
    note_failed_authentication,
    spend_agent_budget,
)

TOKEN_PREFIXES = {ApiTokenKind.TENANT: "hgt_", ApiTokenKind.OPERATOR: "hgo_"}
LAST_USED_RESOLUTION = timedelta(minutes=1)


class ScopedUser:
    """The user an operator token acts as, held to the token's scope: a permission counts only
    if the token was issued with it and the user still has it; superuser only if both. Anything
    else (username, pk, is_staff) is the user's own."""

    def __init__(self, user, token: ApiToken):
        self._user = user
        self._superuser = bool(token.scope_superuser)
        self._scope = frozenset(token.scope_permissions or ())

    def __getattr__(self, name):
        return getattr(self._user, name)

    @property
    def is_superuser(self) -> bool:
        return self._superuser and self._user.is_superuser

    def get_all_permissions(self, obj=None) -> set:
        if not self._user.is_active:
            return set()
        if self.is_superuser:
            return self._user.get_all_permissions(obj)
        return self._user.get_all_permissions(obj) & self._scope

    def has_perm(self, perm: str, obj=None) -> bool:
        if not self._user.is_active:
            return False
        if self.is_superuser:
            return True
        return perm in self._scope and self._user.has_perm(perm, obj)

    def has_perms(self, perms, obj=None) -> bool:
        return all(self.has_perm(p, obj) for p in perms)

    def has_module_perms(self, app_label: str) -> bool:
        return self.is_superuser or any(p.startswith(f"{app_label}.") for p in self.get_all_permissions())

    def __eq__(self, other):
        return self._user == getattr(other, "_user", other)

    def __hash__(self):
        return hash(self._user)

    def __str__(self) -> str:
        return str(self._user)


@dataclass
class Principal:
    """Who is calling: a tenant member's token, an operator's token, or a node agent."""

    kind: str  # "tenant" | "operator" | "agent"
    token_id: UUID | None = None
    tenant: Any = None
    role: str = ""
    user: Any = None
    node_id: UUID | None = None
    extra: dict = field(default_factory=dict)

    is_authenticated = True
    is_anonymous = False

    @property
    def is_staff(self) -> bool:
        return self.kind == "operator"

    @property
    def tenant_id(self):
        return self.tenant.pk if self.tenant is not None else None

    @property
    def can_write(self) -> bool:
        return self.kind == "operator" or (self.kind == "tenant" and self.role in (TenantRole.ADMIN, TenantRole.MEMBER))

    @property
    def idempotency_scope(self) -> str:
        if self.kind == "tenant":
            return f"tenant:{self.tenant.pk}"
        if self.kind == "operator":
            return f"operator:{self.user.pk}"
        return f"agent:{self.node_id}"

    @property
    def actor(self) -> str:
        if self.kind == "tenant":
            return f"token:{self.token_id} (tenant {self.tenant.slug})"
        if self.kind == "operator":
            return f"user:{self.user.get_username()}"
        return f"agent:{self.node_id}"

    def get_username(self) -> str:
        return self.actor


def token_digest(plain: str) -> str:
    return hashlib.sha256(plain.encode()).hexdigest()


def generate_plain_token(kind: str) -> str:
    return TOKEN_PREFIXES[kind] + secrets.token_urlsafe(32)


def _bearer(request) -> str | None:
    header = authentication.get_authorization_header(request).decode("latin-1")
    if not header:
        return None
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        raise exceptions.AuthenticationFailed("Malformed Authorization header.")
    return value.strip()


class BearerTokenAuthentication(authentication.BaseAuthentication):
    """Tenant, operator and agent tokens (the agent kind is only useful on agent routes,
    whose permission classes accept nothing else)."""

    def authenticate(self, request):
        """Every check of a presented token is counted: an address that fails too often gets
        429 before its next guess is looked at (core.api.throttles)."""
        return guarded_authentication(request, self.verify)

    def verify(self, request):
        plain = _bearer(request)
        if plain is None:
            return None
        if looks_like_agent_token(plain):
            return _agent_principal(plain), plain
        token = (
            ApiToken.objects.select_related("tenant", "user")
            .filter(digest=token_digest(plain), revoked_at__isnull=True)
            .first()
        )
        if token is None:
            raise exceptions.AuthenticationFailed("Invalid or revoked token.")
        now = timezone.now()
        if token.expires_at is not None and token.expires_at <= now:
            raise exceptions.AuthenticationFailed(
                f"This token expired at {token.expires_at:%Y-%m-%d %H:%M}Z; ask for a new one."
            )
        if token.kind == ApiTokenKind.OPERATOR and not (token.user.is_active and token.user.is_staff):
            raise exceptions.AuthenticationFailed("This operator account is disabled.")
        if token.last_used_at is None or token.last_used_at < now - LAST_USED_RESOLUTION:
            # At most one write a minute per token, not one per request.
            ApiToken.objects.filter(pk=token.pk).filter(
                Q(last_used_at__isnull=True) | Q(last_used_at__lt=now - LAST_USED_RESOLUTION)
            ).update(last_used_at=now)
        user = ScopedUser(token.user, token) if token.kind == ApiTokenKind.OPERATOR else token.user
        principal = Principal(kind=token.kind, token_id=token.pk, tenant=token.tenant, role=token.role, user=user)
        return principal, token

    def authenticate_header(self, request):
        return 'Bearer realm="hangar"'


class AgentTokenAuthentication(BearerTokenAuthentication):
    """Agent routes: anything that is not a valid agent signature is 401 (docs/api.md).

    A validly signed token is checked before the address's failed-authentication budget, not
    after: the signature check is local arithmetic (no guess reaches the database), so the
    budget only has guesses to count; it saves the heartbeat path one Redis round trip, and one
    broken agent behind a shared NAT address cannot lock its neighbours out. Anything else
    (forged, malformed) goes through the budget as before."""

    def authenticate(self, request):
        plain = _bearer(request)
        identity = None if plain is None else verify_agent_token(plain)
        if identity is not None:
            return _agent_principal(plain, request=request, identity=identity), plain
        return super().authenticate(request)

    def verify(self, request):
        plain = _bearer(request)
        if plain is None:
            return None
        return _agent_principal(plain, request=request), plain


class LedgerAgentTokenAuthentication(AgentTokenAuthentication):
    """Meter ingest: the same check against the ledger's copy of the revocation list, so it
    needs no control-plane database. Failures count toward the address's budget as on every
    other route (a forged token waits behind it; a revoked one is counted)."""

    def authenticate(self, request):
        plain = _bearer(request)
        identity = None if plain is None else verify_agent_token(plain)
        if identity is not None:
            return _agent_principal(plain, using="ledger", request=request, identity=identity), plain
        return BearerTokenAuthentication.authenticate(self, request)

    def verify(self, request):
        plain = _bearer(request)
        if plain is None:
            return None
        return _agent_principal(plain, using="ledger", request=request), plain


_COUNTED = "_hangar_failed_auth_counted"  # guarded_authentication must not count the same failure twice


def _agent_principal(plain: str, using: str = "default", request=None, identity=None) -> Principal:
    """`identity`: the token's, when the caller has just verified it (the signature check is
    ~75 µs of CPU, a twentieth of a heartbeat; it was made twice on every agent request)."""
    identity = identity or verify_agent_token(plain)
    if identity is None:
        raise exceptions.AuthenticationFailed(
            "Not a valid agent token (forged, malformed, of the old hga1 form, or signed under another key); "
            "issue one with manage.py create_token --agent HOSTNAME."
        )
    # The node's revocation entry comes back in the round trip that spends its rate budget.
    cached = (
        UNREAD
        if request is None
        else spend_agent_budget(request, identity.node_id, read_key=revocation_cache_key(identity.node_id, using))
    )
    reason = revocation_reason(identity, using=using, cached=None if cached is UNREAD else cached)
    if reason is not None:
        # A validly signed token of a past identity (a tenant's copy after its rental, a node
        # re-keyed): refused, recorded, and counted like any failed check of this address.
        address = client_address(request) if request is not None else ""
        audit_refused_token(identity, reason, using=using, address=address)
        if request is not None and not getattr(request, _COUNTED, False):
            setattr(request, _COUNTED, True)
            note_failed_authentication(request)
        raise exceptions.AuthenticationFailed(f"Revoked agent token: {reason}.")
    return Principal(
        kind="agent", node_id=identity.node_id, extra={"key_id": identity.key_id, "issued_at": identity.issued_at}
    )
