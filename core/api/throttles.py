"""API rate limits, one budget per caller: a tenant (all its tokens together), an operator
(per user), a node agent (per node), and per client address for requests without a valid
token. Over the budget → 429 problem+json with Retry-After (core.api.problems).

Failed bearer authentications are counted per address too, so guessing tokens is throttled
before a single guess is checked once the budget is spent.

Rates come from settings.API_THROTTLE_RATES (read at each request, so they can be tuned per
deployment) and counts live in the default cache (Redis when REDIS_URL is set, so every web
process shares them).

A budget of N per window W is a sliding-window counter: one counter per caller and window
slot (W seconds), and a request is allowed while this slot's count plus the previous slot's,
weighted by how much of it still lies in the trailing W seconds, stays within N. It costs
one Redis round trip (an INCR, its EXPIRE and a GET, pipelined) and two integers per caller
whatever the rate: DRF's sliding log kept and re-pickled every timestamp of the window
(up to 1,200 for a tenant) in two round trips per request. The weighting assumes the
previous slot's requests were spread evenly; a caller that packs N requests at the very end
of one slot can get up to N more in the next W seconds, so a burst is bounded by 2N, and
a steady rate by N per W.
"""

import math
import time

from django.conf import settings
from rest_framework import authentication, exceptions
from rest_framework.throttling import BaseThrottle, SimpleRateThrottle

from core.cache import count_hit, read_counts, uncount_hit

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


def _slots(key: str, window: int, now: float) -> tuple[str, str, float]:
    """This slot's counter key, the previous slot's, and how far into this slot `now` is (0–1)."""
    slot = math.floor(now / window)
    return f"{key}:{slot}", f"{key}:{slot - 1}", now / window - slot


def _estimate(current: int, previous: int, into: float) -> float:
    return previous * (1 - into) + current


def _wait(current: int, previous: int, into: float, limit: int, window: int) -> float:
    """Seconds until one more request fits: later in this slot if the previous slot's share
    is what is over, else into the next slot (where this one's count becomes the share)."""
    if current < limit and previous:
        # previous × (1 − f) + current + 1 ≤ limit from this fraction f of the slot on
        fits_at = 1 - (limit - current - 1) / previous
        return max(0.0, fits_at - into) * window
    fits_at = 1 - (limit - 1) / current if current else 0.0  # current × (1 − f) + 1 ≤ limit
    return (1 - into + max(0.0, fits_at)) * window


def spend(key: str, limit: int, window: int, *, now: float | None = None) -> float | None:
    """One request against the budget `key`: None when allowed (and counted), else the
    seconds to wait (and not counted)."""
    return _spend(key, limit, window, now=now)[0]


def _spend(key: str, limit: int, window: int, *, now: float | None = None, read_key: str | None = None):
    """`spend`, and the cached value at `read_key`, in the same round trip."""
    now = time.time() if now is None else now
    this, last, into = _slots(key, window, now)
    current, previous, value = count_hit(this, last, 2 * window, read_key)
    if _estimate(current, previous, into) <= limit:
        return None, value
    uncount_hit(this)
    return _wait(current - 1, previous, into, limit, window), value


def exhausted(key: str, limit: int, window: int, *, now: float | None = None) -> float | None:
    """Like `spend` without spending: None while the budget has room, else the wait."""
    now = time.time() if now is None else now
    this, last, into = _slots(key, window, now)
    current, previous = read_counts(this, last)
    if _estimate(current + 1, previous, into) <= limit:
        return None
    return _wait(current, previous, into, limit, window)


# The verdict of a budget already spent for this request (spend_agent_budget), read by the throttle.
_PREPAID_WAIT = "_hangar_throttle_wait"
UNREAD = object()  # spend_agent_budget read nothing: the caller reads its value itself


class TokenKindThrottle(BaseThrottle):
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
        if hasattr(request, _PREPAID_WAIT):  # spent during authentication, in its round trip
            self._wait = getattr(request, _PREPAID_WAIT)
            return self._wait is None
        scope, ident = self._caller(request)
        rate = _rate(scope)
        if rate is None:
            return True
        self._wait = spend(f"throttle:{scope}:{ident}", *rate)
        return self._wait is None

    def wait(self):
        return self._wait


def spend_agent_budget(request, node_id, *, read_key: str):
    """Spend node `node_id`'s agent budget for this request now and return the cached value
    at `read_key` (None when absent), both in one Redis round trip; the throttle then takes
    this verdict instead of spending again. The agent authenticator reads its node's
    revocation entry this way, which saves every agent call a round trip (its CPU is most of
    the web tier's cost per heartbeat). UNREAD when the view has no TokenKindThrottle or
    agents have no budget: nothing was spent or read."""
    view = (getattr(request, "parser_context", None) or {}).get("view")
    rate = _rate("agent")
    if rate is None or view is None or TokenKindThrottle not in getattr(view, "throttle_classes", ()):
        return UNREAD
    wait, value = _spend(f"throttle:agent:{node_id}", *rate, read_key=read_key)
    setattr(request, _PREPAID_WAIT, wait)
    return value


def _failed_auth_key(request) -> str:
    return f"throttle:{FAILED_AUTH_SCOPE}:{client_address(request)}"


def refuse_if_too_many_failed_authentications(request) -> None:
    """Before checking a bearer token: an address that has failed too often waits."""
    rate = _rate(FAILED_AUTH_SCOPE)
    if rate is None:
        return
    wait = exhausted(_failed_auth_key(request), *rate)
    if wait is not None:
        raise exceptions.Throttled(
            wait=max(1, math.ceil(wait)), detail="Too many failed authentications from this address."
        )


def note_failed_authentication(request) -> None:
    rate = _rate(FAILED_AUTH_SCOPE)
    if rate is None:
        return
    _limit, window = rate
    this, last, _ = _slots(_failed_auth_key(request), window, time.time())
    count_hit(this, last, 2 * window)


def guarded_authentication(request, verify):
    """Run `verify(request)` (a bearer-token check) under the failed-authentication budget."""
    if not authentication.get_authorization_header(request):
        return verify(request)
    refuse_if_too_many_failed_authentications(request)
    try:
        return verify(request)
    except exceptions.AuthenticationFailed:
        if not getattr(request, "_hangar_failed_auth_counted", False):
            note_failed_authentication(request)
        raise
