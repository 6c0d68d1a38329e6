"""The drive gate on every exit from custody: RMA, retire, dispose and custody transfers.

End to end through the ops API and the agent API: a node a tenant used is refused at each
exit until the drives the agent reported have verified records, with evidence, of the method
its destination needs. A property test walks the transition table at random (single and
batched moves) and never gets a node with unverified drives out of custody.
"""

import contextlib
import uuid

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from fleet.choices import AgentAction, DispositionOption, Lifecycle
from fleet.models import Drive, Node, NodeAgentAction
from fleet.services import sanitization
from fleet.services.drive_gate import EXIT_OF_STATE
from fleet.services.lifecycle import TRANSITIONS, InvalidTransition, transition, transition_many
from planning.models import DispositionAssignment, DispositionPlan

from .lifecycle_helpers import EVIDENCE, act, place, record, report_drives

pytestmark = pytest.mark.django_db
OUT_OF_CUSTODY = frozenset(EXIT_OF_STATE)


def key() -> str:
    return str(uuid.uuid4())


def agent_drives(node, *, unpurgeable: str = ""):
    """What the agent sees: the node's drives, all purgeable but `unpurgeable`."""
    return [
        {
            "serial": d.serial,
            "model": d.model,
            "capacity_gb": d.capacity_gb,
            "self_encrypting": False,
            "purge_supported": d.serial != unpurgeable,
        }
        for d in node.drives.order_by("serial")
    ]


@pytest.fixture
def used_node(small_fleet):
    """A node that served a tenant (available → provisioning → active), then was pulled to triage."""
    node = place(Node.objects.order_by("hostname").first(), Lifecycle.AVAILABLE)
    for state in (Lifecycle.PROVISIONING, Lifecycle.ACTIVE, Lifecycle.QUARANTINED, Lifecycle.TRIAGE):
        node = transition(node, state, actor="test", action="setup")
    return node


def test_a_tenant_used_node_passes_rma_retire_and_dispose_only_with_verified_drives(ops_api, used_node):
    node = used_node
    drives = list(node.drives.order_by("serial"))
    unpurgeable = drives[-1].serial

    # RMA: refused with no inventory, then with records missing, wrong or without evidence
    r = act(ops_api, node, "rma")
    assert r.status_code == 409 and r.json()["code"] == "sanitization_incomplete"
    assert any("no drive inventory" in m for m in r.json()["gate"]["missing"])
    report_drives(node, agent_drives(node, unpurgeable=unpurgeable))
    checklist = ops_api.get(f"/api/v1/ops/nodes/{node.pk}/data-handling").json()
    required = {d["serial"]: d["required_method"] for d in checklist["rma_gate"]["drives"]}
    assert required == {d.serial: ("destroy" if d.serial == unpurgeable else "purge") for d in drives}
    act(ops_api, node, "sanitize")  # queues what the agent can do, with the method shown above
    queued = {
        a.params["serial"]: a.params["method"]
        for a in NodeAgentAction.objects.filter(node=node, action=AgentAction.SANITIZE_DRIVE)
    }
    assert queued == {d.serial: "purge" for d in drives if d.serial != unpurgeable}
    for drive in drives:
        assert record(ops_api, drive, "clear").status_code == 201  # clear does not do for media that leaves
    assert act(ops_api, node, "rma").status_code == 409
    assert record(ops_api, drives[0], "purge", evidence="").status_code == 400  # the API wants evidence
    sanitization.record_sanitization(
        drive=drives[0], method="purge", technique="t", tool="t", verified=True, evidence="  ", actor="agent:x"
    )  # a blank record does not count either
    for drive in drives[:-1]:
        record(ops_api, drive, "purge", verified=False)  # a failed verification does not count
    r = act(ops_api, node, "rma")
    assert r.status_code == 409 and len([d for d in r.json()["gate"]["drives"] if not d["ok"]]) == len(drives)
    for drive in drives[:-1]:
        assert record(ops_api, drive, "purge").status_code == 201
    r = act(ops_api, node, "rma")
    assert r.status_code == 409 and [d["serial"] for d in r.json()["gate"]["drives"] if not d["ok"]] == [unpurgeable]
    record(ops_api, drives[-1], "destroy", evidence="shredded, recycler certificate RC-991 with serial list")
    r = act(ops_api, node, "rma")
    assert r.status_code == 202 and r.json()["lifecycle"] == Lifecycle.RMA

    # retire: the inventory predates decommissioning, so the agent must count again
    assert act(ops_api, node, "decommission").status_code == 202
    act(ops_api, node, "sanitize")
    ops_api.post(f"/api/v1/ops/nodes/{node.pk}/bmc-reset", {}, format="json", HTTP_IDEMPOTENCY_KEY=key())
    r = act(ops_api, node, "retire")
    assert r.status_code == 409 and any("predates" in m for m in r.json()["missing"])
    report_drives(node, agent_drives(node, unpurgeable=unpurgeable))
    assert act(ops_api, node, "retire").status_code == 202

    # dispose: custody off site passes the same gate; a drive deleted from the records after the
    # agent counted it is a disagreement that blocks it
    ops_api.post(f"/api/v1/ops/nodes/{node.pk}/asset-tags-removed", {}, format="json", HTTP_IDEMPOTENCY_KEY=key())
    spare = Drive.objects.create(node=node, serial="SPARE-1", model="m", capacity_gb=1)
    report_drives(node, agent_drives(node, unpurgeable=unpurgeable))
    spare.delete()  # what deleting it in the admin does
    custody = {"from_party": "dc1", "to_party": "Recycler Ltd", "destination_kind": "recycler", "document_ref": "BOL-7"}
    r = ops_api.post(
        f"/api/v1/ops/nodes/{node.pk}/custody-transfers", custody, format="json", HTTP_IDEMPOTENCY_KEY=key()
    )
    assert r.status_code == 409 and "SPARE-1" in r.json()["detail"]
    report_drives(node, agent_drives(node, unpurgeable=unpurgeable))
    r = ops_api.post(
        f"/api/v1/ops/nodes/{node.pk}/custody-transfers", custody, format="json", HTTP_IDEMPOTENCY_KEY=key()
    )
    assert r.status_code == 201, r.json()
    assert act(ops_api, node, "dispose").status_code == 202
    assert Node.objects.get(pk=node.pk).lifecycle == Lifecycle.DISPOSED


def test_an_rma_with_the_drives_aboard_needs_the_carrier_and_every_drives_status(ops_api, used_node):
    node = used_node
    report_drives(node)
    serials = list(node.drives.order_by("serial").values_list("serial", flat=True))
    shipment = {
        "from_party": "dc1",
        "to_party": "Vendor RMA depot",
        "document_ref": "RMA-5521",
        "kind": "rma_shipment",
        "carrier": "",
        "drive_status": [{"serial": s, "status": "sealed, bag T-1"} for s in serials[:-1]],
    }
    url = f"/api/v1/ops/nodes/{node.pk}/custody-transfers"
    assert ops_api.post(url, shipment, format="json", HTTP_IDEMPOTENCY_KEY=key()).status_code == 409
    shipment["carrier"] = "SecureFreight"
    r = ops_api.post(url, shipment, format="json", HTTP_IDEMPOTENCY_KEY=key())
    assert r.status_code == 409 and serials[-1] in r.json()["detail"]
    shipment["drive_status"].append({"serial": serials[-1], "status": "sealed, bag T-2"})
    assert ops_api.post(url, shipment, format="json", HTTP_IDEMPOTENCY_KEY=key()).status_code == 201
    r = act(ops_api, node, "rma")
    assert r.status_code == 202 and r.json()["lifecycle"] == Lifecycle.RMA


def test_missing_and_new_drives_are_reconciled_and_a_missing_one_blocks_the_exit(ops_api, used_node):
    node = used_node
    drives = list(node.drives.order_by("serial"))
    seen = agent_drives(node)[1:] + [
        {
            "serial": "NEW-1",
            "model": "Kioxia CM7",
            "capacity_gb": 3840,
            "self_encrypting": True,
            "purge_supported": True,
        }
    ]
    report_drives(node, seen)
    gone = Drive.objects.get(pk=drives[0].pk)
    assert gone.missing_since is not None
    new = Drive.objects.get(serial="NEW-1")
    assert new.node_id == node.pk and new.self_encrypting and new.last_reported_at is not None
    for drive in node.drives.exclude(pk=gone.pk):
        record(ops_api, drive, "purge")
    r = act(ops_api, node, "rma")
    assert r.status_code == 409 and any(gone.serial in m and "missing" in m for m in r.json()["gate"]["missing"])
    events = ops_api.get(f"/api/v1/ops/nodes/{node.pk}/events").json()
    assert any("MISSING" in e["reason"] and gone.serial in e["reason"] for e in events["results"])
    report_drives(node, agent_drives(node))  # found again (and NEW-1 is now missing)
    assert act(ops_api, node, "rma").status_code == 409
    record(ops_api, new, "destroy", evidence="destroyed on site, photo ref P-17")
    record(ops_api, gone, "purge")
    assert act(ops_api, node, "rma").status_code == 202


def test_clear_suffices_only_once_custody_passes_inside_the_organisation(ops_api, used_node):
    """A redeploy plan does not lower the requirement by itself (sanitize asks the agent for
    purge); a custody transfer to one of the organisation's own sites does, over cleared drives."""
    node = transition(used_node, Lifecycle.DECOMMISSIONING, actor="test", action="setup")
    plan = DispositionPlan.objects.create(name="p", created_by="test", inputs={}, result={})
    DispositionAssignment.objects.create(plan=plan, node=node, option=DispositionOption.REDEPLOY, pool="inference")
    report_drives(node)
    act(ops_api, node, "sanitize")
    methods = set(
        NodeAgentAction.objects.filter(node=node, action=AgentAction.SANITIZE_DRIVE).values_list(
            "params__method", flat=True
        )
    )
    assert methods == {"purge"}
    for drive in node.drives.all():
        record(ops_api, drive, "clear")
    ops_api.post(f"/api/v1/ops/nodes/{node.pk}/bmc-reset", {}, format="json", HTTP_IDEMPOTENCY_KEY=key())
    assert act(ops_api, node, "retire").status_code == 409
    inside = {"from_party": "dc1", "to_party": "dc2", "destination_kind": "own_site", "document_ref": "MOVE-1"}
    r = ops_api.post(
        f"/api/v1/ops/nodes/{node.pk}/custody-transfers", inside, format="json", HTTP_IDEMPOTENCY_KEY=key()
    )
    assert r.status_code == 201 and r.json()["destination"] == "inside"
    assert act(ops_api, node, "retire").status_code == 202


def test_records_made_before_the_last_tenant_use_do_not_count(ops_api, small_fleet):
    node = place(Node.objects.order_by("hostname").first(), Lifecycle.AVAILABLE)
    for drive in node.drives.all():
        record(ops_api, drive, "purge")  # sanitised, then a tenant used it again
    for state in (Lifecycle.PROVISIONING, Lifecycle.ACTIVE, Lifecycle.QUARANTINED, Lifecycle.TRIAGE):
        node = transition(node, state, actor="test", action="setup")
    report_drives(node)
    r = act(ops_api, node, "rma")
    assert r.status_code == 409 and all("after its last tenant use" in d["problem"] for d in r.json()["gate"]["drives"])


def test_the_automatic_rma_is_held_by_the_gate_too(used_node):
    changes = transition_many([used_node], Lifecycle.RMA, actor="system:health_sweep", action="health_rma")
    node = Node.objects.get(pk=used_node.pk)
    assert changes == [] and node.lifecycle == Lifecycle.TRIAGE and "drive gate" in node.last_error


def test_the_agent_inventory_is_validated(used_node):
    from rest_framework.test import APIClient

    from core.api.agent_tokens import mint_agent_token

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {mint_agent_token(used_node.pk)}")
    bad = {
        "observed_at": "2026-11-02T10:00:00Z",
        "drives": [{"serial": ""}, {"serial": "A", "capacity_gb": -1}, {"serial": "A", "self_encrypting": "yes"}, "x"]
        + [{"serial": f"S{i}"} for i in range(70)],
    }
    r = client.post("/api/agent/v1/health-reports", bad, format="json")
    assert r.status_code == 400 and {e["field"] for e in r.json()["errors"]} == {"drives"}
    bad["drives"] = bad["drives"][:4]
    fields = {e["field"] for e in client.post("/api/agent/v1/health-reports", bad, format="json").json()["errors"]}
    assert fields == {
        "drives.0.serial",
        "drives.1.capacity_gb",
        "drives.2.serial",
        "drives.2.self_encrypting",
        "drives.3",
    }
    assert not Drive.objects.filter(serial="A").exists()


# ---- property: no path out of custody bypasses the gate --------------------------------------

STATES = sorted(Lifecycle.values)
ATTEMPTED_EXITS: set = set()


# Walks that surely reach each gated move (active → … → sanitizing → retired; active →
# quarantined → triage → rma), single and batched, besides the random ones.
TO_RETIRED = [(1, False, False), (1, False, False), (0, False, False), (0, False, False), (0, False, False)]
TO_RMA = [(0, False, False), (1, False, False)]


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@example(walk=TO_RETIRED + [(0, False, False)], inventory=True, wrong_records=True)
@example(walk=TO_RETIRED + [(0, True, False)], inventory=False, wrong_records=False)
@example(walk=TO_RMA + [(2, False, False)], inventory=True, wrong_records=True)
@example(walk=TO_RMA + [(2, True, False)], inventory=True, wrong_records=False)
@given(
    walk=st.lists(st.tuples(st.integers(0, 40), st.booleans(), st.booleans()), min_size=1, max_size=30),
    inventory=st.booleans(),
    wrong_records=st.booleans(),
)
def test_no_walk_through_the_table_takes_unverified_drives_out_of_custody(used_node, walk, inventory, wrong_records):
    """From a tenant-used node, try any sequence of moves (single transition() or batched
    transition_many(), as the loops do): with the inventory or without it, with records of a
    method too weak or none, the node never reaches rma, retired or disposed."""
    node = place(used_node, Lifecycle.ACTIVE)
    if inventory:
        report_drives(node, agent_drives(node))
    if wrong_records:
        for drive in node.drives.all():
            sanitization.record_sanitization(
                drive=drive, method="clear", technique="t", tool="t", verified=True, evidence=EVIDENCE, actor="test"
            )
    for choice, batched, off_table in walk:
        node.refresh_from_db()
        assert node.lifecycle not in OUT_OF_CUSTODY
        # mostly follow the table (so walks reach triage and the end of life), sometimes not
        allowed = sorted(TRANSITIONS[node.lifecycle])
        target = STATES[choice % len(STATES)] if off_table or not allowed else allowed[choice % len(allowed)]
        ATTEMPTED_EXITS.update({target} & OUT_OF_CUSTODY if target in allowed else set())
        if batched:
            transition_many([node], target, actor="system:test", action="walk")
        else:
            with contextlib.suppress(InvalidTransition):
                transition(node, target, actor="user:test", action="walk")
        node.refresh_from_db()
        assert node.lifecycle not in OUT_OF_CUSTODY
        if target in OUT_OF_CUSTODY and target in TRANSITIONS[node.lifecycle]:
            assert "drive gate" in node.last_error or not batched


def test_the_random_walks_did_try_every_exit():
    """The property above is only worth something if its walks reached the gated moves
    (disposed is only reachable from retired, which the gate already stopped)."""
    assert {Lifecycle.RMA, Lifecycle.RETIRED} <= ATTEMPTED_EXITS


@pytest.mark.pdf
def test_the_node_page_shows_the_gate_and_the_certificate_comes_as_pdf(
    operator_client, ops_api, used_node, django_user_model
):
    from django.test import Client

    node = transition(used_node, Lifecycle.DECOMMISSIONING, actor="test", action="setup")
    page = operator_client.get(f"/fleet/nodes/{node.pk}/").content.decode()
    assert "Drives and the exit gate" in page and "none reported" in page
    report_drives(node)
    page = operator_client.get(f"/fleet/nodes/{node.pk}/").content.decode()
    assert "purge" in page and "Burn-in and validation runs" in page
    pdf_url = f"/fleet/nodes/{node.pk}/certificate.pdf"
    assert operator_client.get(pdf_url).status_code == 409  # not complete: no certificate
    for drive in node.drives.all():
        record(ops_api, drive, "purge")
    ops_api.post(f"/api/v1/ops/nodes/{node.pk}/bmc-reset", {}, format="json", HTTP_IDEMPOTENCY_KEY=key())
    act(ops_api, node, "sanitize")
    assert act(ops_api, node, "retire").status_code == 202
    html = operator_client.get(f"/fleet/nodes/{node.pk}/certificate/").content.decode()
    assert all(d.serial in html for d in node.drives.all()) and "leaves the organisation" in html
    assert "Signed off by user:" in html or "Signed off by token:" in html
    response = operator_client.get(pdf_url)
    assert response.status_code == 200 and response["Content-Type"] == "application/pdf"
    assert response.content.startswith(b"%PDF") and len(response.content) > 2000
    anonymous = Client().get(pdf_url)
    assert anonymous.status_code in (302, 403) and not anonymous.content.startswith(b"%PDF")
    tenant_user = Client()
    tenant_user.force_login(django_user_model.objects.create_user("tenant-user", password="pw-123456789"))
    refused = tenant_user.get(pdf_url)
    assert refused.status_code in (302, 403, 404) and not refused.content.startswith(b"%PDF")
    assert operator_client.get(f"/fleet/nodes/{uuid.uuid4()}/certificate.pdf").status_code == 404
