"""The data-handling gate: sanitisation records (operator API and agent results), the retire and
dispose gates, and the certificate of sanitisation."""

import uuid

import pytest
from django.urls import reverse

from fleet.choices import AgentAction, AgentActionState, Lifecycle
from fleet.models import Drive, Node, NodeAgentAction, SanitizationRecord
from fleet.services import sanitization
from fleet.services.lifecycle import transition
from fleet.services.operator_actions import ActionRefused, perform_operator_action

from .lifecycle_helpers import report_drives

pytestmark = pytest.mark.django_db

RECORD = {
    "method": "purge",
    "technique": "NVMe sanitize crypto erase",
    "tool": "nvme-cli 2.8",
    "verified": True,
    "evidence": "sanitize log page: SSTAT=0x101 (completed)",
}


def key():
    return str(uuid.uuid4())


@pytest.fixture
def sanitizing_node(small_fleet):
    node = Node.objects.order_by("hostname").first()
    if node.lifecycle != Lifecycle.AVAILABLE:
        transition(node, Lifecycle.BURN_IN, actor="test", action="test")
        transition(node, Lifecycle.AVAILABLE, actor="test", action="test")
    transition(node, Lifecycle.DECOMMISSIONING, actor="test", action="decommission")
    report_drives(node)
    perform_operator_action(node_id=node.pk, action="sanitize", actor="user:op")
    return Node.objects.get(pk=node.pk)


def record_all(ops_api, node, skip=()):
    for drive in node.drives.order_by("serial"):
        if drive.serial in skip:
            continue
        r = ops_api.post(
            f"/api/v1/ops/drives/{drive.pk}/sanitization-records", RECORD, format="json", HTTP_IDEMPOTENCY_KEY=key()
        )
        assert r.status_code == 201, r.json()


def test_sanitize_moves_to_sanitizing_and_queues_one_action_per_drive(sanitizing_node):
    actions = NodeAgentAction.objects.filter(node=sanitizing_node, action=AgentAction.SANITIZE_DRIVE)
    drives = list(sanitizing_node.drives.all())
    assert sanitizing_node.lifecycle == Lifecycle.SANITIZING
    assert actions.count() == len(drives) == 10
    by_drive = {a.drive_id: a.params for a in actions}
    for d in drives:
        # no disposition plan keeps the node inside: its drives leave, and every one can be purged
        assert by_drive[d.pk]["method"] == "purge"
        assert by_drive[d.pk]["serial"] == d.serial


def test_one_unsanitised_drive_blocks_retire_and_is_listed(ops_api, sanitizing_node):
    last = sanitizing_node.drives.order_by("serial").last()
    record_all(ops_api, sanitizing_node, skip={last.serial})
    ops_api.post(f"/api/v1/ops/nodes/{sanitizing_node.pk}/bmc-reset", {}, format="json", HTTP_IDEMPOTENCY_KEY=key())
    with pytest.raises(ActionRefused) as refused:
        perform_operator_action(node_id=sanitizing_node.pk, action="retire", actor="user:op")
    assert refused.value.code == "sanitization_incomplete"
    assert [(d["id"], d["serial"], d["required_method"]) for d in refused.value.extra["drives"]] == [
        (str(last.pk), last.serial, "purge")
    ]
    assert Node.objects.get(pk=sanitizing_node.pk).lifecycle == Lifecycle.SANITIZING
    checklist = ops_api.get(f"/api/v1/ops/nodes/{sanitizing_node.pk}/data-handling").json()
    assert [d["serial"] for d in checklist["unsanitized_drives"]] == [last.serial]
    assert checklist["destination"] == "outside"


def test_retire_through_the_actions_api_answers_409_listing_the_drive(ops_api, sanitizing_node):
    url = reverse("ops-node-actions", kwargs={"pk": sanitizing_node.pk})
    last = sanitizing_node.drives.order_by("serial").last()
    record_all(ops_api, sanitizing_node, skip={last.serial})
    r = ops_api.post(url, {"action": "retire", "reason": "end of life"}, format="json", HTTP_IDEMPOTENCY_KEY=key())
    assert r.status_code == 409
    assert r.json()["code"] == "sanitization_incomplete"
    assert [d["serial"] for d in r.json()["drives"]] == [last.serial]


def test_a_failed_record_does_not_count_and_bmc_reset_is_required(ops_api, sanitizing_node):
    record_all(ops_api, sanitizing_node)
    first = sanitizing_node.drives.order_by("serial").first()
    with pytest.raises(ActionRefused) as refused:
        perform_operator_action(node_id=sanitizing_node.pk, action="retire", actor="user:op")
    assert refused.value.extra["drives"] == []
    assert any("BMC" in m for m in refused.value.extra["missing"])
    ops_api.post(
        f"/api/v1/ops/drives/{first.pk}/sanitization-records",
        {**RECORD, "verified": False},
        format="json",
        HTTP_IDEMPOTENCY_KEY=key(),
    )
    ops_api.post(f"/api/v1/ops/nodes/{sanitizing_node.pk}/bmc-reset", {}, format="json", HTTP_IDEMPOTENCY_KEY=key())
    # an earlier passing record still stands; a failed retry adds evidence, it does not erase it
    node = perform_operator_action(node_id=sanitizing_node.pk, action="retire", actor="user:op")
    assert node.lifecycle == Lifecycle.RETIRED


def test_dispose_needs_tags_and_custody(ops_api, sanitizing_node):
    record_all(ops_api, sanitizing_node)
    ops_api.post(f"/api/v1/ops/nodes/{sanitizing_node.pk}/bmc-reset", {}, format="json", HTTP_IDEMPOTENCY_KEY=key())
    perform_operator_action(node_id=sanitizing_node.pk, action="retire", actor="user:op")
    with pytest.raises(ActionRefused) as refused:
        perform_operator_action(node_id=sanitizing_node.pk, action="dispose", actor="user:op")
    assert refused.value.code == "disposal_incomplete" and len(refused.value.extra["missing"]) == 2
    ops_api.post(
        f"/api/v1/ops/nodes/{sanitizing_node.pk}/asset-tags-removed", {}, format="json", HTTP_IDEMPOTENCY_KEY=key()
    )
    r = ops_api.post(
        f"/api/v1/ops/nodes/{sanitizing_node.pk}/custody-transfers",
        {
            "from_party": "dc1",
            "to_party": "SecondLife GPU Brokers",
            "destination_kind": "buyer",
            "document_ref": "BOL-42",
        },
        format="json",
        HTTP_IDEMPOTENCY_KEY=key(),
    )
    assert r.status_code == 201 and r.json()["dispose_missing"] == []
    node = perform_operator_action(node_id=sanitizing_node.pk, action="dispose", actor="user:op")
    assert node.lifecycle == Lifecycle.DISPOSED


def test_operator_record_validation_404_and_idempotency(ops_api, small_fleet):
    drive = Drive.objects.first()
    url = f"/api/v1/ops/drives/{drive.pk}/sanitization-records"
    bad = ops_api.post(
        url, {**RECORD, "method": "wipe", "verified": "maybe"}, format="json", HTTP_IDEMPOTENCY_KEY=key()
    )
    assert bad.status_code == 400
    assert {e["field"] for e in bad.json()["errors"]} == {"method", "verified"}
    assert ops_api.post(url, RECORD, format="json").json()["code"] == "idempotency_key_missing"
    missing = ops_api.post(
        f"/api/v1/ops/drives/{uuid.uuid4()}/sanitization-records", RECORD, format="json", HTTP_IDEMPOTENCY_KEY=key()
    )
    assert missing.status_code == 404
    assert (
        ops_api.post(
            "/api/v1/ops/drives/not-a-uuid/sanitization-records", RECORD, format="json", HTTP_IDEMPOTENCY_KEY=key()
        ).status_code
        == 404
    )
    k = key()
    first = ops_api.post(url, RECORD, format="json", HTTP_IDEMPOTENCY_KEY=k)
    again = ops_api.post(url, RECORD, format="json", HTTP_IDEMPOTENCY_KEY=k)
    assert first.status_code == again.status_code == 201
    assert first.json()["id"] == again.json()["id"] and again["Idempotent-Replayed"] == "true"
    assert SanitizationRecord.objects.filter(drive=drive).count() == 1
    assert first.json()["drive_serial"] == drive.serial and first.json()["source"] == "operator"


def test_tenant_tokens_cannot_record(api, small_fleet):
    drive = Drive.objects.first()
    r = api.post(
        f"/api/v1/ops/drives/{drive.pk}/sanitization-records", RECORD, format="json", HTTP_IDEMPOTENCY_KEY=key()
    )
    assert r.status_code == 401
    assert not SanitizationRecord.objects.exists()


def test_records_cannot_be_changed_or_deleted(small_fleet):
    drive = Drive.objects.first()
    record = sanitization.record_sanitization(drive=drive, actor="user:op", **RECORD)
    record.verified = False
    with pytest.raises(PermissionError):
        record.save()
    with pytest.raises(PermissionError):
        record.delete()
    with pytest.raises(PermissionError):
        SanitizationRecord.objects.filter(pk=record.pk).update(verified=False)
    with pytest.raises(PermissionError):
        SanitizationRecord.objects.all().delete()
    assert SanitizationRecord.objects.get(pk=record.pk).verified is True


def _finished_agent_action(drive, **overrides):
    payload = {
        "drive_serial": drive.serial,
        "method": "purge",
        "technique": "cryptographic erase (NVMe Format SES=2)",
        "tool": "nvme-cli format --ses=2",
        "verified": True,
        "evidence": "sha256:abc $ nvme format -> 0",
    }
    payload.update(overrides)
    return NodeAgentAction.objects.create(
        node=drive.node,
        drive=drive,
        action=AgentAction.SANITIZE_DRIVE,
        state=AgentActionState.SUCCEEDED,
        requested_by="user:op",
        output={"sanitization_record": payload},
    )


def test_agent_result_creates_one_record(small_fleet):
    drive = Drive.objects.first()
    action = _finished_agent_action(drive)
    record = sanitization.record_sanitization_from_agent(action)
    assert sanitization.record_sanitization_from_agent(action) == record  # idempotent
    assert (record.drive, record.method, record.verified, record.source) == (drive, "purge", True, "agent")
    assert record.node_agent_action == action and record.tool == "nvme-cli format --ses=2"
    assert SanitizationRecord.objects.count() == 1


def test_agent_result_for_another_drive_is_refused(small_fleet):
    drive, other = Drive.objects.order_by("serial")[:2]
    with pytest.raises(sanitization.InvalidSanitizationRecord):
        sanitization.record_sanitization_from_agent(_finished_agent_action(drive, drive_serial=other.serial))
    assert not SanitizationRecord.objects.exists()


def test_certificate_lists_every_drive(operator_client, ops_api, sanitizing_node):
    refused = operator_client.get(f"/fleet/nodes/{sanitizing_node.pk}/certificate/")
    assert refused.status_code == 409 and "not complete" in refused.content.decode()
    record_all(ops_api, sanitizing_node)
    ops_api.post(f"/api/v1/ops/nodes/{sanitizing_node.pk}/bmc-reset", {}, format="json", HTTP_IDEMPOTENCY_KEY=key())
    page = operator_client.get(f"/fleet/nodes/{sanitizing_node.pk}/certificate/")
    html = page.content.decode()
    assert page.status_code == 200
    for drive in sanitizing_node.drives.all():
        assert drive.serial in html
    assert html.count("NVMe sanitize crypto erase") == 10 and sanitizing_node.serial in html
