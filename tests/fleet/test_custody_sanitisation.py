"""Where the hardware actually goes decides its drives' sanitisation (NIST SP 800-88).

The rule is reference data (core/reference/sanitisation.csv): each kind of custody destination
says whether the media leaves the organisation's control and the weakest method every drive
needs. A custody transfer names its kind; the method is derived from it when the transfer is
made and stored with it; retire and dispose re-check the drives against the transfers actually
made; a disposition plan may raise the requirement, never lower it; the certificate is built from
the transfers, the records and the events, and is refused, with the reason, when they disagree.
"""

import csv
import re
import uuid
from pathlib import Path

import pytest
from django.contrib.auth.models import Group
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rest_framework.test import APIClient

from core.reference_data import sanitisation_rules
from core.services.tokens import create_api_token
from fleet.choices import CustodyDestination, DispositionOption, Lifecycle, SanitizationMethod
from fleet.models import CustodyTransfer, Node
from fleet.services.drive_gate import (
    METHOD_RANK,
    PLAN_DESTINATION,
    RETIRE,
    gate_status,
    method_for,
)
from fleet.services.lifecycle import transition
from planning.models import DispositionAssignment, DispositionPlan
from tenants.services.tenants import create_tenant

from .lifecycle_helpers import act, place, record, report_drives

pytestmark = pytest.mark.django_db
REFERENCE = Path(__file__).resolve().parents[2] / "core" / "reference" / "sanitisation.csv"
LEAVING = sorted(k for k, r in sanitisation_rules().items() if r.leaves_organisation and k != "unspecified")
STAYING = sorted(k for k, r in sanitisation_rules().items() if not r.leaves_organisation)


def key() -> str:
    return str(uuid.uuid4())


def record_all(ops_api, node, method):
    for drive in node.drives.order_by("serial"):
        r = record(ops_api, drive, method)
        assert r.status_code == 201, r.json()


def custody(ops_api, node, destination, to_party="Secondary-market buyer Ltd", ref="SALE-0001", **extra):
    body = {"from_party": "dc1", "to_party": to_party, "document_ref": ref, **extra}
    if destination is not None:
        body["destination_kind"] = destination
    return ops_api.post(
        f"/api/v1/ops/nodes/{node.pk}/custody-transfers", body, format="json", HTTP_IDEMPOTENCY_KEY=key()
    )


def destination(html: str) -> str:
    """The certificate's destination statement."""
    return re.search(r'<dd id="destination">(.*?)</dd>', html).group(1)


def plan(node, option, name=None):
    p = DispositionPlan.objects.create(name=name or f"{option} plan", created_by="test", inputs={}, result={})
    DispositionAssignment.objects.create(plan=p, node=node, option=option, pool="")
    return p


@pytest.fixture
def used_node(small_fleet):
    """A node a tenant used, now on its way out (sanitizing) with its drives reported."""
    node = place(Node.objects.order_by("hostname").first(), Lifecycle.AVAILABLE)
    for state in (Lifecycle.PROVISIONING, Lifecycle.ACTIVE, Lifecycle.QUARANTINED, Lifecycle.TRIAGE):
        node = transition(node, state, actor="test", action="setup")
    node = transition(node, Lifecycle.DECOMMISSIONING, actor="test", action="setup")
    report_drives(node)
    return transition(node, Lifecycle.SANITIZING, actor="test", action="setup")


# ---- the rule as data, consistent both ways ---------------------------------------------------


def test_every_destination_kind_has_exactly_one_nist_row_and_every_row_is_a_kind():
    with REFERENCE.open(newline="", encoding="utf-8") as handle:
        kinds = [row["destination_kind"] for row in csv.DictReader(handle)]
    assert sorted(kinds) == sorted(set(kinds)) == sorted(CustodyDestination.values)
    assert set(PLAN_DESTINATION) == set(DispositionOption.values)
    assert set(PLAN_DESTINATION.values()) <= set(sanitisation_rules())


def test_the_rows_follow_nist_leaving_control_means_purge_or_destroy_and_verification():
    for kind, rule in sanitisation_rules().items():
        assert rule.verification_required, kind
        if rule.leaves_organisation:
            assert (rule.minimum_method, rule.unpurgeable_method) == ("purge", "destroy"), kind
        else:
            assert (rule.minimum_method, rule.unpurgeable_method) == ("clear", "clear"), kind
        assert "NIST SP 800-88" in rule.source or rule.source.startswith("assumed"), kind
        assert "Figure 4-1" in rule.source, kind


@pytest.mark.parametrize("kind", sorted(CustodyDestination.values))
@pytest.mark.parametrize("purgeable", [True, False])
def test_the_gate_derives_each_drives_method_from_the_row(kind, purgeable):
    """Code → data: what the gate asks of a drive is the row's method, and nothing else."""
    rule = sanitisation_rules()[kind]
    expected = rule.minimum_method if purgeable else rule.unpurgeable_method
    assert method_for(rule, self_encrypting=False, purge_supported=purgeable) == expected
    assert method_for(rule, self_encrypting=True, purge_supported=False) == rule.minimum_method


@pytest.mark.parametrize("kind", LEAVING + STAYING)
def test_a_transfer_accepts_clear_records_exactly_when_its_row_says_clear_suffices(ops_api, used_node, kind):
    """Data → behaviour: for each kind in the file, the API accepts or refuses a transfer over
    cleared drives as the row says, and stores the row's method with the transfer."""
    record_all(ops_api, used_node, "clear")
    rule = sanitisation_rules()[kind]
    r = custody(ops_api, used_node, kind)
    if rule.leaves_organisation:
        serials = sorted(used_node.drives.values_list("serial", flat=True))
        assert r.status_code == 409 and r.json()["code"] == "sanitization_incomplete"
        assert r.json()["lacking_drives"] == serials
        assert all(s in r.json()["detail"] for s in serials) and "purge or destroy" in r.json()["detail"]
        assert not CustodyTransfer.objects.exists()
        record_all(ops_api, used_node, "purge")
        r = custody(ops_api, used_node, kind)
    assert r.status_code == 201, r.json()
    transfer = CustodyTransfer.objects.get()
    assert transfer.destination_kind == kind
    assert (transfer.leaves_organisation, transfer.required_method) == (rule.leaves_organisation, rule.minimum_method)
    assert len(transfer.drives) == 10 and all(d["record_id"] for d in transfer.drives)
    listed = r.json()["custody"][0]
    assert (listed["destination_kind"], listed["leaves_organisation"]) == (kind, rule.leaves_organisation)


def test_a_transfer_must_name_the_kind_of_party_and_cannot_be_dated_ahead(ops_api, used_node):
    record_all(ops_api, used_node, "purge")
    missing = custody(ops_api, used_node, None)
    assert missing.status_code == 400 and {e["field"] for e in missing.json()["errors"]} == {"destination_kind"}
    assert custody(ops_api, used_node, "unspecified").status_code == 400  # only old rows carry it
    assert custody(ops_api, used_node, "neighbour").status_code == 400
    ahead = (timezone.now() + timezone.timedelta(days=1)).isoformat()
    assert custody(ops_api, used_node, "buyer", at=ahead).status_code == 400
    wrong = custody(ops_api, used_node, "buyer", kind="rma_shipment", carrier="X")
    assert wrong.status_code == 400
    before = (timezone.now() - timezone.timedelta(days=30)).isoformat()
    backdated = custody(ops_api, used_node, "buyer", at=before)  # before the records that vouch for the drives
    assert backdated.status_code == 409 and "cannot vouch" in backdated.json()["detail"]
    assert not CustodyTransfer.objects.exists()


# ---- the two bypass paths of issue 39 ---------------------------------------------------------


def test_bypass_1_a_lease_plan_and_clear_records_cannot_send_the_drives_to_a_buyer(ops_api, operator_client, used_node):
    """A plan says lease; the drives are cleared; custody to a buyer is refused, naming each
    drive, and so is retire (no transfer keeps the node inside, and a plan cannot), until every
    drive has a verified purge; the certificate then says the node leaves the organisation and
    never that it stays inside."""
    node = used_node
    plan(node, DispositionOption.LEASE)
    serials = sorted(node.drives.values_list("serial", flat=True))
    act(ops_api, node, "sanitize")
    queued = set(node.agent_actions.filter(action="sanitize_drive").values_list("params__method", flat=True))
    assert queued == {"purge"}  # the lease plan does not lower what the agent is asked to do
    record_all(ops_api, node, "clear")
    r = custody(ops_api, node, "buyer")
    assert r.status_code == 409 and r.json()["code"] == "sanitization_incomplete"
    assert r.json()["lacking_drives"] == serials and r.json()["destination"] == "outside"
    assert all(s in r.json()["detail"] for s in serials) and "purge or destroy" in r.json()["detail"]
    assert {b["source"] for b in r.json()["basis"]} == {"pending", "plan"}
    ops_api.post(f"/api/v1/ops/nodes/{node.pk}/bmc-reset", {}, format="json", HTTP_IDEMPOTENCY_KEY=key())
    ops_api.post(f"/api/v1/ops/nodes/{node.pk}/asset-tags-removed", {}, format="json", HTTP_IDEMPOTENCY_KEY=key())
    r = act(ops_api, node, "retire")
    assert r.status_code == 409 and r.json()["lacking_drives"] == serials
    assert ops_api.get(f"/api/v1/ops/nodes/{node.pk}/data-handling").json()["destination"] == "outside"
    record_all(ops_api, node, "purge")
    assert act(ops_api, node, "retire").status_code == 202
    r = act(ops_api, node, "dispose")
    assert r.status_code == 409 and "custody transfer" in r.json()["detail"]
    assert custody(ops_api, node, "buyer").status_code == 201
    assert act(ops_api, node, "dispose").status_code == 202
    html = operator_client.get(f"/fleet/nodes/{node.pk}/certificate/").content.decode()
    assert destination(html).startswith("leaves the organisation (purge") and "inside the organisation" not in html
    assert "Secondary-market buyer Ltd" in html and "disposed" in html


def test_bypass_1_a_transfer_recorded_before_this_rule_is_re_checked_at_retire_and_dispose(
    ops_api, operator_client, used_node
):
    """A transfer to a buyer already on record over cleared drives (as the old code let through):
    retire and dispose re-check the drives against it and refuse, naming each drive; the
    certificate is refused with the reason."""
    node = used_node
    plan(node, DispositionOption.LEASE)
    record_all(ops_api, node, "clear")
    CustodyTransfer.objects.create(
        node=node,
        from_party="dc1",
        to_party="Secondary-market buyer Ltd",
        at=timezone.now(),
        document_ref="SALE-0001",
        recorded_by="user:op",
    )  # destination_kind unspecified, as the rows recorded before it existed
    ops_api.post(f"/api/v1/ops/nodes/{node.pk}/bmc-reset", {}, format="json", HTTP_IDEMPOTENCY_KEY=key())
    serials = sorted(node.drives.values_list("serial", flat=True))
    r = act(ops_api, node, "retire")
    assert r.status_code == 409 and r.json()["code"] == "sanitization_incomplete"
    assert r.json()["lacking_drives"] == serials and all(s in r.json()["detail"] for s in serials)
    cert = operator_client.get(f"/fleet/nodes/{node.pk}/certificate/")
    assert cert.status_code == 409 and "inside the organisation" not in cert.content.decode()
    place(node, Lifecycle.RETIRED)  # as if it had been retired before the rule: dispose re-checks too
    ops_api.post(f"/api/v1/ops/nodes/{node.pk}/asset-tags-removed", {}, format="json", HTTP_IDEMPOTENCY_KEY=key())
    r = act(ops_api, node, "dispose")
    assert r.status_code == 409 and r.json()["lacking_drives"] == serials
    record_all(ops_api, node, "purge")
    report_drives(node)
    assert act(ops_api, node, "dispose").status_code == 202
    cert = operator_client.get(f"/fleet/nodes/{node.pk}/certificate/")
    refusals = ops_api.get(f"/api/v1/ops/nodes/{node.pk}/data-handling").json()["certificate"]["refusals"]
    # the purge came after the drives went to the buyer, and no event shows it being retired
    assert cert.status_code == 409 and any("before custody passed" in m for m in refusals)
    assert any("no event records it entering retired" in m for m in refusals)
    assert all(any(s in m for m in refusals) for s in serials)


def test_bypass_2_a_newer_lease_plan_does_not_lower_a_resale_plans_purge(ops_api, used_node):
    node = used_node
    plan(node, DispositionOption.RESALE, name="sell them")
    record_all(ops_api, node, "clear")
    ops_api.post(f"/api/v1/ops/nodes/{node.pk}/bmc-reset", {}, format="json", HTTP_IDEMPOTENCY_KEY=key())
    serials = sorted(node.drives.values_list("serial", flat=True))
    first = act(ops_api, node, "retire")
    assert first.status_code == 409 and first.json()["lacking_drives"] == serials
    plan(node, DispositionOption.LEASE, name="lease them after all")
    again = act(ops_api, node, "retire")
    assert again.status_code == 409 and again.json()["lacking_drives"] == serials
    assert all(s in again.json()["detail"] for s in serials) and "purge or destroy" in again.json()["detail"]
    basis = ops_api.get(f"/api/v1/ops/nodes/{node.pk}/data-handling").json()["destination_basis"]
    assert [b["text"] for b in basis][:2] == [
        "disposition plan 'sell them' says resale (a buyer)",
        "disposition plan 'lease them after all' says lease (another site of the organisation)",
    ]
    assert [b["source"] for b in basis] == ["plan", "plan", "default"]
    record_all(ops_api, node, "purge")
    assert act(ops_api, node, "retire").status_code == 202


def test_only_a_transfer_inside_the_organisation_lets_clear_suffice(ops_api, operator_client, used_node):
    """A redeploy plan alone does not make clear enough; a transfer to the organisation's own lab
    does, until the hardware goes on to a buyer, which needs purge again."""
    node = used_node
    plan(node, DispositionOption.REDEPLOY)
    record_all(ops_api, node, "clear")
    ops_api.post(f"/api/v1/ops/nodes/{node.pk}/bmc-reset", {}, format="json", HTTP_IDEMPOTENCY_KEY=key())
    assert act(ops_api, node, "retire").status_code == 409
    assert custody(ops_api, node, "own_lab", to_party="Hangar lab", ref="INT-1").status_code == 201
    assert act(ops_api, node, "retire").status_code == 202
    html = operator_client.get(f"/fleet/nodes/{node.pk}/certificate/").content.decode()
    assert destination(html).startswith("stays inside the organisation (clear suffices while it stays")
    assert "Hangar lab" in html
    assert custody(ops_api, node, "buyer").status_code == 409
    record_all(ops_api, node, "purge")
    assert custody(ops_api, node, "buyer").status_code == 201
    html = operator_client.get(f"/fleet/nodes/{node.pk}/certificate/").content.decode()
    assert destination(html).startswith("leaves the organisation (purge")


def test_a_transfer_whose_stored_method_disagrees_with_nist_refuses_the_certificate(
    ops_api, operator_client, used_node
):
    node = used_node
    record_all(ops_api, node, "purge")
    ops_api.post(f"/api/v1/ops/nodes/{node.pk}/bmc-reset", {}, format="json", HTTP_IDEMPOTENCY_KEY=key())
    assert act(ops_api, node, "retire").status_code == 202
    assert operator_client.get(f"/fleet/nodes/{node.pk}/certificate/").status_code == 200
    CustodyTransfer.objects.create(
        node=node,
        from_party="dc1",
        to_party="Buyer",
        at=timezone.now(),
        document_ref="X",
        recorded_by="forged",
        destination_kind=CustodyDestination.BUYER,
        leaves_organisation=False,
        required_method="clear",
    )
    page = operator_client.get(f"/fleet/nodes/{node.pk}/certificate/")
    assert page.status_code == 409 and "stored clear (inside the organisation)" in page.content.decode()


# ---- property: a plan never lowers, a transfer always holds -----------------------------------

OPTIONS = sorted(DispositionOption.values)


@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    history=st.lists(
        st.one_of(
            st.tuples(st.just("plan"), st.sampled_from(OPTIONS)),
            st.tuples(st.just("transfer"), st.sampled_from(sorted(CustodyDestination.values))),
        ),
        max_size=5,
    )
)
def test_the_requirement_is_the_strongest_of_every_plan_and_transfer(used_node, history):
    """Random histories of plans and transfers (sizes 0, 1, 2 and more): each drive's
    requirement is the strongest method any of them needs (purge while no transfer says where it
    goes), and adding any plan afterwards never lowers it."""
    # A fresh tenant use starts a fresh window: earlier examples' transfers no longer count.
    node = place(used_node, Lifecycle.ACTIVE)
    for state in (Lifecycle.QUARANTINED, Lifecycle.TRIAGE, Lifecycle.DECOMMISSIONING, Lifecycle.SANITIZING):
        node = transition(node, state, actor="test", action="setup")
    DispositionAssignment.objects.filter(node=node).delete()
    expected = []
    for i, (what, value) in enumerate(history):
        if what == "plan":
            plan(node, value)
            expected.append(sanitisation_rules()[PLAN_DESTINATION[value]].minimum_method)
        else:
            rule = sanitisation_rules()[value]
            CustodyTransfer.objects.create(
                node=node,
                from_party="dc1",
                to_party=f"party {i}",
                at=timezone.now(),
                document_ref=f"D{i}",
                recorded_by="test",
                destination_kind=value,
                leaves_organisation=rule.leaves_organisation,
                required_method=rule.minimum_method,
            )
            expected.append(rule.minimum_method)
    gate = gate_status([node.pk], RETIRE)[node.pk]
    assert len([b for b in gate.basis if b.source == "transfer"]) == sum(1 for w, _ in history if w == "transfer")
    if not any(w == "transfer" for w, _ in history):
        expected.append(SanitizationMethod.PURGE)  # no transfer says where it goes: treated as leaving
    want = max(expected, key=METHOD_RANK.__getitem__)
    assert {d.required for d in gate.drives} == {want}  # every drive of the seed can be purged
    assert gate.destination == ("outside" if want == SanitizationMethod.PURGE else "inside")
    for option in OPTIONS:
        p = plan(node, option)
        raised = gate_status([node.pk], RETIRE)[node.pk]
        assert all(METHOD_RANK[d.required] >= METHOD_RANK[want] for d in raised.drives)
        p.delete()


# ---- who may record custody -------------------------------------------------------------------


def test_only_an_operator_with_the_custody_permission_may_record_a_transfer(ops_api, used_node, django_user_model):
    record_all(ops_api, used_node, "purge")
    viewer = django_user_model.objects.create_user("ro", password="x", is_staff=True)
    viewer.groups.add(Group.objects.get(name="read-only"))
    billing = django_user_model.objects.create_user("bill", password="x", is_staff=True)
    billing.groups.add(Group.objects.get(name="billing-admins"))
    tenant, _ = create_tenant(slug="acme", name="Acme", max_nodes=8, actor="test")
    _, tenant_plain = create_api_token(kind="tenant", tenant=tenant, role="admin", actor="test")
    for user in (viewer, billing):
        _, plain = create_api_token(kind="operator", user=user, actor="test")
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {plain}")
        refused = custody(client, used_node, "buyer")
        assert refused.status_code == 403 and "fleet.add_custodytransfer" in refused.content.decode()
    as_tenant = APIClient()
    as_tenant.credentials(HTTP_AUTHORIZATION=f"Bearer {tenant_plain}")
    assert custody(as_tenant, used_node, "buyer").status_code in (401, 403)
    assert as_tenant.get(f"/api/v1/ops/nodes/{used_node.pk}/data-handling").status_code in (401, 403)
    assert not CustodyTransfer.objects.exists()
    assert custody(ops_api, used_node, "buyer").status_code == 201
