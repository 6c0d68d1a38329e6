"""The bring-up ladder between enrolled and burn-in: ordered steps checked against the agent's
inventory, failures naming the layer and the missing dependency, bounded retries, time limits
from facility.csv, results as node events."""

from datetime import timedelta

import pytest
from django.utils import timezone

from fleet.models import Node, NodeAgentAction, NodeEvent, NodeType
from fleet.services.bring_up import FIRMWARE_LIMIT, MAX_ATTEMPTS, advance_bring_up

from .software_helpers import report_stack

pytestmark = pytest.mark.django_db


@pytest.fixture
def node(small_fleet):
    node = Node.objects.order_by("hostname").first()
    Node.objects.filter(pk=node.pk).update(lifecycle="enrolled")  # test setup: a newly enrolled node
    node.refresh_from_db()
    return node


def _start(ops_api, node, key="k1"):
    response = ops_api.post(
        f"/api/v1/ops/nodes/{node.pk}/actions",
        {"action": "start_bring_up", "reason": "new rack"},
        format="json",
        HTTP_IDEMPOTENCY_KEY=key,
    )
    assert response.status_code == 202, response.content
    node.refresh_from_db()
    return node


def _as_blackwell_hgx(node):
    b200 = NodeType.objects.get(generation="blackwell", rack_kw__isnull=True, gpus_per_node=8)
    Node.objects.filter(pk=node.pk).update(node_type=b200)  # test setup: the node is an HGX B200
    node.refresh_from_db()
    return node


def _checks(node):
    return list(
        NodeEvent.objects.filter(node=node, action__startswith="bring_up.")
        .order_by("at", "id")
        .values_list("action", "reason")
    )


def test_a_complete_stack_climbs_every_step_into_burn_in(ops_api, node):
    report_stack(node)
    _start(ops_api, node)
    assert node.lifecycle == "bringing_up"
    advance_bring_up()
    node.refresh_from_db()
    assert node.lifecycle == "burn_in"
    assert sorted(a for a, _ in _checks(node)) == sorted(
        [
            "bring_up.firmware",
            "bring_up.os_kernel",
            "bring_up.driver",
            "bring_up.fabric_manager",
            "bring_up.network_stack",
            "bring_up.gpudirect",
            "bring_up.cuda_nccl",
            "bring_up.container_runtime",
        ]
    )
    assert "GPU driver 570.133.20" in dict(_checks(node))["bring_up.driver"]
    assert NodeAgentAction.objects.filter(node=node, action="burn_in", state="pending").exists()
    advance_bring_up()  # idempotent: nothing more happens
    assert len(_checks(node)) == 8


def test_blackwell_hgx_without_the_ib_stack_fails_at_the_fabric_manager_step(ops_api, node):
    node = _as_blackwell_hgx(node)
    report_stack(node, drop=("ib_stack", "nvidia_peermem"), fabric_manager=("570.133.20", "failed"))
    _start(ops_api, node)
    now = timezone.now()
    for attempt in range(MAX_ATTEMPTS):
        advance_bring_up(now=now + timedelta(minutes=10 * attempt))
    node.refresh_from_db()
    assert node.lifecycle == "bring_up_failed"
    assert node.last_error.startswith("bring-up failed at fabric_manager: fabric manager: needs the InfiniBand stack")
    assert "bridge device" in node.last_error and "not installed" in node.last_error
    failures = [r for a, r in _checks(node) if a == "bring_up.fabric_manager"]
    assert [f.split(":")[0] for f in failures] == [f"check failed ({i} of {MAX_ATTEMPTS})" for i in (1, 2, 3)]
    # the earlier layers passed and are recorded; nothing above the failed step ran
    assert {a for a, _ in _checks(node)} == {
        "bring_up.firmware",
        "bring_up.os_kernel",
        "bring_up.driver",
        "bring_up.fabric_manager",
    }
    assert not NodeAgentAction.objects.filter(node=node, action="burn_in").exists()


def test_a_failed_check_is_retried_with_backoff_not_on_every_pass(ops_api, node):
    node = _as_blackwell_hgx(node)
    report_stack(node, drop=("ib_stack",))
    _start(ops_api, node)
    now = timezone.now()
    advance_bring_up(now=now)
    advance_bring_up(now=now + timedelta(seconds=5))  # before the retry is due
    assert len([a for a, _ in _checks(node) if a == "bring_up.fabric_manager"]) == 1
    node.refresh_from_db()
    assert node.lifecycle == "bringing_up" and node.bring_up.step == "fabric_manager"


def test_hopper_has_no_ib_dependency_for_fabric_manager_and_fails_at_network_stack(ops_api, node):
    report_stack(node, ib_stack=("", "missing"))
    _start(ops_api, node)
    now = timezone.now()
    for attempt in range(MAX_ATTEMPTS):
        advance_bring_up(now=now + timedelta(minutes=10 * attempt))
    node.refresh_from_db()
    assert node.lifecycle == "bring_up_failed"
    assert node.last_error.startswith("bring-up failed at network_stack:")


def test_a_layer_never_reported_is_held_until_the_step_time_limit_from_facility_csv(ops_api, node):
    assert FIRMWARE_LIMIT == timedelta(hours=6)  # facility.csv firmware_zap_stage: "fail if > 6 h"
    _start(ops_api, node)  # the agent has reported nothing yet
    advance_bring_up(now=timezone.now() + timedelta(hours=5))
    node.refresh_from_db()
    assert node.lifecycle == "bringing_up" and "waiting for the agent" in node.bring_up.last_result
    advance_bring_up(now=timezone.now() + timedelta(hours=6, minutes=1))
    node.refresh_from_db()
    assert node.lifecycle == "bring_up_failed"
    assert "not ready within 6 h (facility.csv firmware_zap_stage" in node.last_error


def test_retry_after_the_layer_is_fixed_reaches_burn_in(ops_api, node):
    node = _as_blackwell_hgx(node)
    report_stack(node, drop=("ib_stack",))
    _start(ops_api, node)
    now = timezone.now()
    for attempt in range(MAX_ATTEMPTS):
        advance_bring_up(now=now + timedelta(minutes=10 * attempt))
    node.refresh_from_db()
    assert node.lifecycle == "bring_up_failed"
    report_stack(node)  # the IB stack is installed
    _start(ops_api, node, key="k2")
    assert node.bring_up.step == "firmware" and node.bring_up.attempts == 0
    advance_bring_up()
    node.refresh_from_db()
    assert node.lifecycle == "burn_in"


def test_start_bring_up_is_refused_outside_enrolled_or_bring_up_failed(ops_api, node):
    Node.objects.filter(pk=node.pk).update(lifecycle="available")
    response = ops_api.post(
        f"/api/v1/ops/nodes/{node.pk}/actions",
        {"action": "start_bring_up", "reason": "x"},
        format="json",
        HTTP_IDEMPOTENCY_KEY="k9",
    )
    assert response.status_code == 409
    assert not NodeEvent.objects.filter(node=node, action="start_bring_up").exists()
