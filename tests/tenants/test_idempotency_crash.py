"""Exactly-once creates: a process killed between the phases of an idempotent create never
leaves a second allocation behind (the fault suite does the same with a real kill -9)."""

import pytest
from django.test import override_settings

from core.faults import SimulatedCrash, parse_fault_points
from core.models import IdempotencyRecord
from tenants.models import Allocation

pytestmark = pytest.mark.django_db

BODY = {"name": "train", "instance_type": "h100-sxm-8x", "node_count": 1}


@pytest.mark.parametrize("point", ["idempotency.after_perform", "idempotency.before_commit"])
def test_a_crash_between_the_phases_then_a_retry_makes_one_allocation(small_fleet, client_a, point):
    with override_settings(FAULT_POINTS={point: "raise"}), pytest.raises(SimulatedCrash):
        client_a.post("/api/v1/allocations", BODY, format="json", HTTP_IDEMPOTENCY_KEY="crash-1")
    # the work and the record died together: nothing to find, nothing half-done
    assert Allocation.objects.count() == 0 and IdempotencyRecord.objects.count() == 0
    retry = client_a.post("/api/v1/allocations", BODY, format="json", HTTP_IDEMPOTENCY_KEY="crash-1")
    assert retry.status_code == 202, retry.content
    again = client_a.post("/api/v1/allocations", BODY, format="json", HTTP_IDEMPOTENCY_KEY="crash-1")
    assert again.status_code == 202 and again["Idempotent-Replayed"] == "true"
    assert again.json()["id"] == retry.json()["id"]
    assert Allocation.objects.count() == 1


def test_a_refused_create_leaves_no_record(small_fleet, client_a):
    refused = client_a.post(
        "/api/v1/allocations", {**BODY, "node_count": 0}, format="json", HTTP_IDEMPOTENCY_KEY="bad-1"
    )
    assert refused.status_code == 400
    assert not IdempotencyRecord.objects.exists()
    fixed = client_a.post("/api/v1/allocations", BODY, format="json", HTTP_IDEMPOTENCY_KEY="bad-1")
    assert fixed.status_code == 202  # the corrected request may reuse the key


def test_fault_points_parse():
    assert parse_fault_points("a=exit, b=exit-once:/tmp/x,c") == {"a": "exit", "b": "exit-once:/tmp/x", "c": "exit"}
    assert parse_fault_points("") == {}
