"""HTTP client for the node agent API (`/api/agent/v1/`).

The session is injectable: the real agent uses a `requests.Session`; the fleet
simulator shares one session (one connection pool) between thousands of
`AgentTransport` objects, each carrying its own node token; tests pass fakes.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import Any, Protocol

import requests

log = logging.getLogger(__name__)

MAX_METER_BATCH = 1000
RETRYABLE_STATUSES = frozenset({409, 429})


class TransportError(Exception):
    """A call to the control plane failed."""

    def __init__(self, message: str, *, status: int | None = None, body: Any = None) -> None:
        super().__init__(message)
        self.status = status
        self.body = body


class RetryableError(TransportError):
    """Worth retrying later: connection trouble, timeouts, 5xx, 429, 409."""

    def __init__(
        self, message: str, *, status: int | None = None, body: Any = None, retry_after: float | None = None
    ) -> None:
        super().__init__(message, status=status, body=body)
        self.retry_after = retry_after


class PermanentError(TransportError):
    """The server refused this request (4xx); sending it again will not help."""


class AuthError(PermanentError):
    """401/403: the agent's token is wrong. Not the message's fault, so nothing is discarded."""


class HTTPSession(Protocol):
    """The part of `requests.Session` the transport uses."""

    def request(self, method: str, url: str, **kwargs: Any) -> Any: ...


class AgentAPI(Protocol):
    """What the Agent needs from the control plane; `AgentTransport` is the HTTP implementation."""

    def heartbeat(self, payload: dict[str, Any]) -> Any: ...
    def health_report(self, payload: dict[str, Any]) -> Any: ...
    def software_inventory(self, payload: dict[str, Any]) -> Any: ...
    def meter_events(self, events: list[dict[str, Any]]) -> Any: ...
    def desired_state(self) -> dict[str, Any]: ...
    def action_result(self, payload: dict[str, Any]) -> Any: ...
    def claim_identity(self, node_id: str, code: str) -> str: ...
    def set_token(self, token: str) -> None: ...


def backoff_delay(attempt: int, *, base: float, cap: float, rng: random.Random) -> float:
    """Full-jitter exponential backoff: uniform in [0, min(cap, base * 2**attempt)].

    Full jitter spreads thousands of agents that failed together (a control-plane
    outage) instead of having them retry in lockstep.
    """
    ceiling = cap if attempt >= 64 else min(cap, base * 2.0 ** max(attempt, 0))
    return rng.uniform(0.0, ceiling)


def _retry_after(response: Any) -> float | None:
    value = (getattr(response, "headers", None) or {}).get("Retry-After")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def _body(response: Any) -> Any:
    try:
        return response.json()
    except ValueError:
        return getattr(response, "text", None)


class AgentTransport:
    """One node's view of the agent API; cheap to create, safe to share a session."""

    def __init__(
        self,
        url: str,
        token: str,
        *,
        session: HTTPSession | None = None,
        timeout: tuple[float, float] = (3.05, 10.0),
        max_attempts: int = 3,
        backoff_base: float = 0.5,
        backoff_cap: float = 30.0,
        rng: random.Random | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """`max_attempts=1` makes every call a single non-blocking try (what the simulator wants)."""
        self.base_url = url.rstrip("/") + "/api/agent/v1/"
        self.session = session if session is not None else requests.Session()
        self.timeout = timeout
        self.max_attempts = max_attempts
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self.rng = rng or random.Random()
        self.sleep = sleep
        self._headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        # desired-state is polled every 10 s and rarely changes: the last answer and its ETag let
        # the server reply 304 with no body (and skip rendering it).
        self._desired: tuple[str, Any] | None = None

    def heartbeat(self, payload: dict[str, Any]) -> Any:
        return self._call("POST", "heartbeat", payload)

    def health_report(self, payload: dict[str, Any]) -> Any:
        return self._call("POST", "health-reports", payload)

    def software_inventory(self, payload: dict[str, Any]) -> Any:
        return self._call("POST", "software-inventory", payload)

    def meter_events(self, events: list[dict[str, Any]]) -> Any:
        if not 0 < len(events) <= MAX_METER_BATCH:
            raise ValueError(f"a meter batch holds 1..{MAX_METER_BATCH} events, got {len(events)}")
        return self._call("POST", "meter-events", {"events": events})

    def desired_state(self) -> dict[str, Any]:
        """The node's desired state; `304 Not Modified` to the last ETag returns the last answer."""
        return self._call("GET", "desired-state")

    def action_result(self, payload: dict[str, Any]) -> Any:
        return self._call("POST", "action-results", payload)

    def set_token(self, token: str) -> None:
        """Speak as another identity from the next call on (after an identity handoff)."""
        self._headers = {**self._headers, "Authorization": f"Bearer {token}"}
        self._desired = None

    def claim_identity(self, node_id: str, code: str) -> str:
        """Exchange the one-time handoff code for the node's new token (no bearer token: the
        code is the credential). Raises AuthError when the server refuses it."""
        url = self.base_url + "identity"
        try:
            response = self.session.request(
                "POST",
                url,
                headers={"Accept": "application/json"},
                json={"node_id": node_id, "code": code},
                timeout=self.timeout,
            )
        except (requests.ConnectionError, requests.Timeout, ConnectionError, TimeoutError) as exc:
            raise RetryableError(f"POST {url}: {exc}") from exc
        body = _body(response)
        if response.status_code == 200 and isinstance(body, dict) and isinstance(body.get("token"), str):
            return body["token"]
        message = f"POST {url}: HTTP {response.status_code}"
        if response.status_code >= 500 or response.status_code in RETRYABLE_STATUSES:
            raise RetryableError(message, status=response.status_code, body=body, retry_after=_retry_after(response))
        raise AuthError(message, status=response.status_code, body=body)

    def _call(self, method: str, path: str, payload: dict[str, Any] | None = None) -> Any:
        attempt = 0
        while True:
            try:
                return self._once(method, path, payload)
            except RetryableError as exc:
                attempt += 1
                if attempt >= self.max_attempts:
                    raise
                delay = backoff_delay(attempt, base=self.backoff_base, cap=self.backoff_cap, rng=self.rng)
                if exc.retry_after is not None:
                    delay = min(max(delay, exc.retry_after), self.backoff_cap)
                log.info("%s %s failed (%s); retry %d in %.1fs", method, path, exc, attempt, delay)
                self.sleep(delay)

    def _once(self, method: str, path: str, payload: dict[str, Any] | None) -> Any:
        url = self.base_url + path
        conditional = path == "desired-state" and self._desired is not None
        headers = {**self._headers, "If-None-Match": self._desired[0]} if conditional else self._headers
        try:
            response = self.session.request(method, url, headers=headers, json=payload, timeout=self.timeout)
        except (requests.ConnectionError, requests.Timeout, ConnectionError, TimeoutError) as exc:
            raise RetryableError(f"{method} {url}: {exc}") from exc
        status = response.status_code
        if status == 304 and conditional:
            return self._desired[1]
        if status < 400:
            body = _body(response) if status != 204 else None
            etag = (getattr(response, "headers", None) or {}).get("ETag")
            if path == "desired-state":
                self._desired = (etag, body) if etag else None
            return body
        body = _body(response)
        message = f"{method} {url}: HTTP {status}"
        if status >= 500 or status in RETRYABLE_STATUSES:
            raise RetryableError(message, status=status, body=body, retry_after=_retry_after(response))
        if status in (401, 403):
            raise AuthError(message, status=status, body=body)
        raise PermanentError(message, status=status, body=body)
