"""HTTP transport: auth header, error classes, retries, and the backoff's bounds."""

from __future__ import annotations

from random import Random
from types import SimpleNamespace

import pytest
import requests
from hypothesis import given
from hypothesis import strategies as st

from hangar_agent.transport import (
    AgentTransport,
    AuthError,
    PermanentError,
    RetryableError,
    backoff_delay,
)


@given(
    attempt=st.integers(min_value=0, max_value=10_000),
    base=st.floats(min_value=0.001, max_value=10),
    cap=st.floats(min_value=10, max_value=3600),
    seed=st.integers(min_value=0, max_value=2**32),
)
def test_backoff_is_capped_full_jitter(attempt: int, base: float, cap: float, seed: int) -> None:
    delay = backoff_delay(attempt, base=base, cap=cap, rng=Random(seed))
    assert 0 <= delay <= min(cap, base * 2.0 ** min(attempt, 60))


class FakeSession:
    def __init__(self, replies: list) -> None:
        self.replies = replies
        self.calls: list[tuple[str, str, dict]] = []

    def request(self, method: str, url: str, **kwargs):
        self.calls.append((method, url, kwargs))
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        status, body = reply
        return SimpleNamespace(status_code=status, json=lambda: body, headers={}, text="")


def transport(replies: list, attempts: int = 3) -> tuple[AgentTransport, FakeSession]:
    session = FakeSession(replies)
    return AgentTransport(
        "http://cp/", "tok", session=session, max_attempts=attempts, sleep=lambda s: None, rng=Random(0)
    ), session


def test_retries_retryable_failures_then_succeeds() -> None:
    t, session = transport(
        [requests.ConnectionError("refused"), (503, {}), (429, {}), (202, {"accepted": 1, "duplicates": 0})], attempts=4
    )
    assert t.meter_events([{"event_id": "e"}]) == {"accepted": 1, "duplicates": 0}
    method, url, kwargs = session.calls[-1]
    assert (method, url) == ("POST", "http://cp/api/agent/v1/meter-events")
    assert kwargs["headers"]["Authorization"] == "Bearer tok" and kwargs["timeout"]


@pytest.mark.parametrize(
    ("status", "error"),
    [(409, RetryableError), (500, RetryableError), (422, PermanentError), (400, PermanentError), (401, AuthError)],
)
def test_error_classes(status: int, error: type) -> None:
    t, _ = transport([(status, {"code": "x"})], attempts=1)
    with pytest.raises(error):
        t.heartbeat({})


def test_permanent_errors_are_not_retried_and_batches_are_bounded() -> None:
    t, session = transport([(422, {})])
    with pytest.raises(PermanentError):
        t.action_result({})
    assert len(session.calls) == 1
    with pytest.raises(ValueError):
        t.meter_events([{}] * 1001)


class EtagSession(FakeSession):
    """Replies are (status, body, headers)."""

    def request(self, method: str, url: str, **kwargs):
        self.calls.append((method, url, kwargs))
        status, body, headers = self.replies.pop(0)
        return SimpleNamespace(status_code=status, json=lambda: body, headers=headers, text="")


def test_desired_state_sends_the_last_etag_and_a_304_returns_the_last_answer() -> None:
    state = {"lifecycle": "available", "actions": []}
    newer = {"lifecycle": "wiping", "actions": []}
    session = EtagSession([(200, state, {"ETag": '"a"'}), (304, None, {"ETag": '"a"'}), (200, newer, {"ETag": '"b"'})])
    t = AgentTransport("http://cp/", "tok", session=session, max_attempts=1)
    assert t.desired_state() == state
    assert "If-None-Match" not in session.calls[0][2]["headers"]
    assert t.desired_state() == state
    assert session.calls[1][2]["headers"]["If-None-Match"] == '"a"'
    assert t.desired_state() == newer
    assert session.calls[2][2]["headers"]["If-None-Match"] == '"a"'
    assert t._desired == ('"b"', newer)
    # other calls never carry the validator
    session.replies.append((202, {}, {}))
    t.heartbeat({})
    assert "If-None-Match" not in session.calls[3][2]["headers"]
