"""Test doubles shared by the agent tests (no Django, no network)."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

from hangar_agent.transport import PermanentError, RetryableError

T0 = datetime(2026, 11, 29, 20, 0, 0, tzinfo=UTC)


class FakeControlPlane:
    """An in-memory AgentAPI: records what it receives, can be taken down, dedupes meter events."""

    def __init__(self) -> None:
        self.down = False
        self.desired: dict[str, Any] = {
            "lifecycle": "available",
            "allocation_id": None,
            "tenant_id": None,
            "actions": [],
        }
        self.heartbeats: list[dict[str, Any]] = []
        self.health_reports: list[dict[str, Any]] = []
        self.action_results: list[dict[str, Any]] = []
        self.meter_calls: list[list[dict[str, Any]]] = []
        self.ledger: dict[str, dict[str, Any]] = {}
        self.received_ids: list[str] = []
        self.reject_ids: set[str] = set()
        self.rejected_ids_with_code: str | None = None  # answer every event as refused with this code

    def _check(self) -> None:
        if self.down:
            raise RetryableError("connection refused")

    def heartbeat(self, payload: dict[str, Any]) -> Any:
        self._check()
        self.heartbeats.append(copy.deepcopy(payload))

    def health_report(self, payload: dict[str, Any]) -> Any:
        self._check()
        self.health_reports.append(payload)

    def action_result(self, payload: dict[str, Any]) -> Any:
        self._check()
        self.action_results.append(payload)

    def desired_state(self) -> dict[str, Any]:
        self._check()
        return copy.deepcopy(self.desired)

    def meter_events(self, events: list[dict[str, Any]]) -> Any:
        self._check()
        assert len(events) <= 1000
        if any(e["event_id"] in self.reject_ids for e in events):
            raise PermanentError("HTTP 422", status=422, body={"code": "validation_error"})
        self.meter_calls.append(events)
        accepted = duplicates = 0
        for event in events:
            if event["event_id"] in self.ledger:
                duplicates += 1
            else:
                accepted += 1
                self.ledger[event["event_id"]] = event
                self.received_ids.append(event["event_id"])
        rejected = (
            [{"event_id": e["event_id"], "code": self.rejected_ids_with_code, "detail": "test"} for e in events]
            if self.rejected_ids_with_code
            else []
        )
        return {"accepted": accepted, "duplicates": duplicates, "rejected": rejected}
