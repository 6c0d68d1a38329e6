"""API rate limits, one budget per caller: a tenant (all its tokens together), an operator
(per user), a node agent (per node), and per client address for requests without a valid
token. Over the budget → 429 problem+json with Retry-After (core.api.problems).

Failed bearer authentications are counted per address too, so guessing tokens is throttled
before a single guess is checked once the budget is spent.

Rates come from settings.API_THROTTLE_RATES (read at each request, so they can be tuned per
deployment) and counts live in the default cache (Redis when REDIS_URL is set, so every web
process shares them).
"""

import time

from django.conf import settings
from django.core.cache import cache
from rest_framework import authentication, exceptions
from rest_framework.throttling import SimpleRateThrottle

FAILED_AUTH_SCOPE = "failed_auth"


def _rate(scope: str) -> tuple[int, int] | None:
    rate = settings.API_THROTTLE_RATES.get(scope)
    return SimpleRateThrottle.parse_rate(None, rate) if rate else None


class _ClientAddress(SimpleRateThrottle):
    """Only for DRF's `get_ident` (REMOTE_ADDR, or X-Forwarded-For behind NUM_PROXIES)."""

    def __init__(self):  # no rate of its own
        pass


def client_address(request) -> str:
    return _ClientAddress().get_ident(request)


class TokenKindThrottle(SimpleRateThrottle):
    cache = cache

    def __init__(self):  # the rate depends on the caller; set in allow_request
        pass

    def _caller(self, request) -> tuple[str, str]:
        principal = getattr(request, "user", None)
        kind = getattr(principal, "kind", None)
        if kind == "tenant":
            return "tenant", str(principal.tenant_id)
        if kind == "operator":
            return "operator", str(principal.user.pk)
        if kind == "agent":
            return "agent", str(principal.node_id)
        return "anonymous", client_address(request)

    def allow_request(self, request, view):
        self.scope, self.ident = self._caller(request)
        rate = _rate(self.scope)
        if rate is None:
            return True
        self.rate = settings.API_THROTTLE_RATES[self.scope]
        self.num_requests, self.duration = rate
        return super().allow_request(request, view)

    def get_cache_key(self, request, view):
        return f"throttle:{self.scope}:{self.ident}"


def _failed_auth_key(request) -> str:
    return f"throttle:{FAILED_AUTH_SCOPE}:{client_address(request)}"


def refuse_if_too_many_failed_authentications(request) -> None:
    """Before checking a bearer token: an address that has failed too often waits."""
    rate = _rate(FAILED_AUTH_SCOPE)
    if rate is None:
        return
    limit, window = rate
    history = cache.get(_failed_auth_key(request), [])
    now = time.time()
    recent = [t for t in history if t > now - window]
    if len(recent) >= limit:
        raise exceptions.Throttled(
            wait=max(1, int(recent[0] + window - now) + 1), detail="Too many failed authentications from this address."
        )


def note_failed_authentication(request) -> None:
    rate = _rate(FAILED_AUTH_SCOPE)
    if rate is None:
        return
    limit, window = rate
    now = time.time()
    key = _failed_auth_key(request)
    recent = [t for t in cache.get(key, []) if t > now - window][-limit:]
    cache.set(key, [*recent, now], window)


def guarded_authentication(request, verify):
    """Run `verify(request)` (a bearer-token check) under the failed-authentication budget."""
    if not authentication.get_authorization_header(request):
        return verify(request)
    refuse_if_too_many_failed_authentications(request)
    try:
        return verify(request)
    except exceptions.AuthenticationFailed:
        note_failed_authentication(request)
        raise
