"""NVIDIA's Xid catalogue as data: the rules derived from it, consistency both ways, and every
catalogue row driven through the agent API to the action the docs promise."""

import pytest
from django.utils import timezone

from core.models import AuditEvent
from fleet.choices import AgentAction, Lifecycle
from fleet.models import Node, NodeAgentAction, NodeType, Rack
from health import xid
from health.choices import ConditionStatus, IncidentState
from health.models import Condition, Incident, IncidentEvent
from health.policy import RULES
from health.services.incidents import update_postmortem
from health.services.sweep import run_health_sweep
from tenants.models import AllocationNode
from tests.fleet.lifecycle_helpers import allocate as _allocate

from .conftest import Agent, gpu

# The oracle, written from docs/health-policy.md ("How a bucket becomes an action"), not from
# health.xid: NVIDIA's bucket → what the node goes through.
DOCUMENTED = {
    "RESTART_APP": "info",
    "IGNORE": "info",
    "RESET_GPU": "reset",
    "RESTART_BM": "reboot",
    "CONTACT_SUPPORT": "hold",
    "CHECK_MECHANICALS": "hold",
    "UPDATE_SWFW": "hold",
    "unconfirmed": "hold",
}
# Rows whose outcome the docs state one by one (decoded, deferred or overridden), with the
# fields the agent sends for them.
SPECIAL = {
    45: ({}, "hold"),  # alone: RESTART_FM, which a person does
    48: ({}, "reset"),
    74: ({"registers": [0, 0x10000, 0, 0, 0, 0, 0]}, "reset"),  # override xid_74_registers_undecoded
    94: ({}, "defer"),  # "reset the GPU when convenient"
    121: ({}, "defer"),  # "reset at a service window"
    144: ({"unit": "SAW_MVB", "error_status": 0x2}, "reset"),
    145: ({"unit": "RLW_REMAP", "error_status": 0x1}, "info"),  # XID_154_EVAL, no 154: RESTART_APP
    146: ({"unit": "TLW_RX", "error_status": 0x1}, "info"),
    147: ({"unit": "TREX", "error_status": 0x1}, "info"),
    148: ({"unit": "NVLPW_CTRL", "error_status": 0x80000000}, "info"),
    149: ({"unit": "NETIR_INT", "error_status": 0x1}, "reset"),
    150: ({"unit": "MSE_WATCHDOG", "error_status": 0x1}, "reset"),
    151: ({}, "reset"),  # override restart_vm_bare_metal
    154: ({"recovery_action": 0}, "info"),
    159: ({}, "defer"),  # override check_uvm_unknown
}

pytestmark = pytest.mark.django_db


def refresh(node):
    return Node.objects.get(pk=node.pk)


def allocate(node):
    """A tenant on the node: the allocation's membership, the node active."""
    membership = _allocate(node)
    Node.objects.filter(pk=node.pk).update(lifecycle=Lifecycle.ACTIVE)
    return membership


def expected(row) -> str:
    if row.xid in SPECIAL:
        return SPECIAL[row.xid][1]
    if not (row.h100 or row.gb200):
        return "hold"  # the catalogue says no current family emits it
    return DOCUMENTED[row.immediate_action]


# ---- consistency, both ways -------------------------------------------------------------------


def test_every_catalogue_row_has_a_rule_citing_its_bucket():
    for number, row in xid.catalog().items():
        rule = RULES[f"xid_{number}"]
        assert rule.event and row.immediate_action in rule.source and "Xid Catalog" in rule.source
        assert row.immediate_action in xid.BUCKETS, f"Xid {number}: bucket {row.immediate_action} has no Hangar action"


def test_every_xid_rule_traces_to_a_catalogue_row():
    xid_rules = {s for s in RULES if s.startswith("xid_") and s[4:].isdigit()}
    assert xid_rules == {f"xid_{n}" for n in xid.catalog()}


def test_every_override_names_catalogue_rows_and_is_applied():
    catalogue = xid.catalog()
    for override in xid.OVERRIDES.values():
        assert set(override.xids) <= set(catalogue), override.name
        assert override.reason and override.catalogue and override.hangar
    # each row-bound override shows on its rows' rules
    for number, row in catalogue.items():
        for name in row.overrides:
            assert f"override {name}" in RULES[f"xid_{number}"].then


def test_the_decode_table_covers_only_nvlink5_rows_with_known_actions():
    for (number, unit, status), action in xid.nvlink5_decode().items():
        assert xid.catalog()[number].immediate_action == "WORKFLOW_NVLINK5_ERR"
        assert action in xid.BUCKETS and unit and status


def test_the_oracle_and_the_derivation_agree_on_every_row():
    for number, row in xid.catalog().items():
        fields = SPECIAL.get(number, ({}, None))[0]
        family = "h100" if row.h100 else ("gb200" if row.gb200 else "")
        assert xid.decide(number, gpu_family=family, event=fields).severity == expected(row), number


# ---- every row through the agent API ----------------------------------------------------------


@pytest.fixture
def gb200_tray(small_fleet):
    gb200 = NodeType.objects.get(slug="gb200-nvl72")
    rack = Rack.objects.filter(cooling="liquid").order_by("name").first()
    return Node.objects.create(
        hostname="gb-0-0", serial="GB00", rack=rack, u_position=1, node_type=gb200, lifecycle=Lifecycle.AVAILABLE
    )


def _send(node, gpus: int, events: list[dict]):
    body = {
        "observed_at": timezone.now().isoformat().replace("+00:00", "Z"),
        "power_state": "on",
        "driver_version": "575.57.08",
        "gpu_architecture": "blackwell" if gpus == 4 else "hopper",
        "gpus": [gpu(i, xid_events=events if i == 1 else []) for i in range(gpus)],
    }
    response = Agent(node).client.post("/api/agent/v1/heartbeat", body, format="json")
    assert response.status_code == 202, response.content
    return response


@pytest.mark.parametrize("number", sorted(xid.catalog()))
def test_each_catalogue_xid_through_the_agent_api_leads_to_its_documented_action(number, nodes, gb200_tray):
    row = xid.catalog()[number]
    node, gpus = (nodes[0], 8) if row.h100 or not row.gb200 else (gb200_tray, 4)
    membership = allocate(node)
    fields = SPECIAL.get(number, ({}, None))[0]
    _send(node, gpus, [{"xid": number, **fields}])
    run_health_sweep()
    node = refresh(node)
    want = expected(row)
    condition = Condition.objects.get(node=node, signal=f"xid_{number}")
    assert condition.severity == want and condition.gpu_index == 1
    assert f"Xid {number} on GPU 1: catalogue" in condition.detail
    in_service = AllocationNode.objects.filter(pk=membership.pk, ended_at__isnull=True).exists()
    if want == "info":
        assert not node.cordoned and node.lifecycle == Lifecycle.ACTIVE and in_service
        assert not Incident.objects.exists()
    elif want in ("hold", "defer"):
        assert node.cordoned and node.lifecycle == Lifecycle.ACTIVE  # no new work, the tenant stays
        assert node.cordon_reason.startswith("operator decision" if want == "hold" else "GPU reset at next release")
        assert Incident.objects.filter(severity="hold").exists() == (want == "hold")
    else:
        assert node.lifecycle in (Lifecycle.DRAINING, Lifecycle.REMEDIATING) and node.cordoned
        assert Incident.objects.get().severity == want


# ---- the cases the issue names ------------------------------------------------------------------


def test_xid_154_with_recovery_action_none_leaves_the_tenants_node_in_service(nodes):
    membership = allocate(nodes[0])
    _send(nodes[0], 8, [{"xid": 94}, {"xid": 154, "recovery_action": 0}])
    run_health_sweep()
    node = refresh(nodes[0])
    assert node.lifecycle == Lifecycle.ACTIVE and AllocationNode.objects.get(pk=membership.pk).ended_at is None
    # 94 asks for a reset when convenient: no new work until the node is free, then the reset
    assert node.cordoned and node.cordon_reason.startswith("GPU reset at next release")
    membership.ended_at = timezone.now()
    membership.save()
    Node.objects.filter(pk=node.pk).update(lifecycle=Lifecycle.AVAILABLE)
    run_health_sweep()
    assert refresh(node).lifecycle == Lifecycle.REMEDIATING
    assert NodeAgentAction.objects.filter(node=node, action=AgentAction.GPU_RESET).exists()


def test_xid_154_reporting_a_gpu_reset_resets(nodes):
    _send(nodes[0], 8, [{"xid": 154, "recovery_action": 1}])
    run_health_sweep()
    assert refresh(nodes[0]).lifecycle == Lifecycle.REMEDIATING
    assert NodeAgentAction.objects.filter(node=nodes[0], action=AgentAction.GPU_RESET).exists()


def test_xid_143_on_an_h100_keeps_the_node_from_new_work_until_it_is_reset(nodes):
    membership = allocate(nodes[0])
    _send(nodes[0], 8, [{"xid": 143}])
    run_health_sweep()
    node = refresh(nodes[0])
    assert node.cordoned and node.lifecycle in (Lifecycle.DRAINING, Lifecycle.REMEDIATING)
    membership.refresh_from_db()
    assert membership.ended_at is not None  # the tenant was given a replacement
    run_health_sweep()
    assert NodeAgentAction.objects.filter(node=node, action=AgentAction.GPU_RESET).exists()
    assert refresh(node).cordoned


def test_an_unknown_xid_holds_the_node_and_opens_an_operator_task(nodes, operator_user):
    membership = allocate(nodes[0])
    _send(nodes[0], 8, [{"xid": 4242}])
    run_health_sweep()
    node = refresh(nodes[0])
    assert node.cordoned and node.cordon_reason == "operator decision: xid_4242"
    assert node.lifecycle == Lifecycle.ACTIVE and AllocationNode.objects.get(pk=membership.pk).ended_at is None
    task = Incident.objects.get()
    assert task.severity == "hold" and task.signals == ["xid_4242"]
    page = IncidentEvent.objects.get(incident=task, step="page").detail
    assert "Xid 4242 on GPU 1" in page and "not in the catalogue" in page
    run_health_sweep()
    assert Incident.objects.count() == 1  # one task, not one per sweep
    update_postmortem(
        incident=task, actor=operator_user.username, cause="driver R580 Xid, benign", attribution="provider", close=True
    )
    task.refresh_from_db()
    assert task.state == IncidentState.CLOSED
    assert AuditEvent.objects.filter(action="incident.close").exists()
    assert not refresh(node).cordoned
    assert not Condition.objects.filter(node=node, status=ConditionStatus.ACTIVE, severity="hold").exists()


def test_blackwell_rlw_remap_follows_the_xid_154_reported_with_it(gb200_tray):
    _send(gb200_tray, 4, [{"xid": 145, "unit": "RLW_REMAP", "error_status": 0x4}, {"xid": 154, "recovery_action": 1}])
    severities = dict(Condition.objects.filter(node=gb200_tray).values_list("signal", "severity"))
    assert severities == {"xid_145": "reset", "xid_154": "reset"}


def test_an_xid_the_family_does_not_emit_holds(nodes):
    _send(nodes[0], 8, [{"xid": 121}])  # C2C: GB200 only
    condition = Condition.objects.get(node=nodes[0])
    assert condition.severity == "hold" and "wrong_family" in condition.detail


def test_xid_48_with_63_drains_and_resets_not_fatal(nodes):
    _send(nodes[0], 8, [{"xid": 48}, {"xid": 63}])
    run_health_sweep()
    assert refresh(nodes[0]).lifecycle == Lifecycle.REMEDIATING
    assert Incident.objects.get().severity == "reset"


@pytest.mark.parametrize(
    "event",
    [
        {"xid": 0},
        {"xid": 154, "recovery_action": 9},
        {"xid": 145, "unit": "rlw remap"},
        {"xid": 145, "error_status": -1},
        {"xid": 145, "intr_info": 2**40},
        {"xid": 74, "registers": [1] * 8},
        {"xid": 74, "colour": "red"},
        "154",
    ],
)
def test_bad_xid_events_are_400_problems(nodes, event):
    body = {"power_state": "on", "gpus": [gpu(0, xid_events=[event])]}
    response = Agent(nodes[0]).client.post("/api/agent/v1/heartbeat", body, format="json")
    assert response.status_code == 400 and response["Content-Type"].startswith("application/problem+json")
    assert response.json()["errors"][0]["field"].startswith("gpus.0.xid_events")


def test_driver_version_and_architecture_are_bounded_and_kept(nodes):
    agent = Agent(nodes[0])
    bad = {"power_state": "on", "driver_version": "575; drop", "gpu_architecture": "volta", "gpus": []}
    response = agent.client.post("/api/agent/v1/heartbeat", bad, format="json")
    fields = {e["field"] for e in response.json()["errors"]}
    assert response.status_code == 400 and fields == {"driver_version", "gpu_architecture"}
    _send(nodes[0], 8, [])
    telemetry = refresh(nodes[0]).gpu_telemetry
    assert telemetry["driver_version"] == "575.57.08" and telemetry["gpu_architecture"] == "hopper"


def test_the_agents_own_heartbeat_with_xid_events_is_accepted_and_decoded(nodes):
    """The simulated agent's payload, as it sends it: Xid 94 with the 154 the driver adds."""
    from hangar_agent.hardware.simulated import SimulatedHardware

    hardware = SimulatedHardware(random_faults=False, hostname=nodes[0].hostname)
    hardware.advance(timezone.now(), allocated=True)
    hardware.inject_xid(2, 94)
    hardware.inject_xid(5, 62)
    body = {
        "observed_at": timezone.now().isoformat().replace("+00:00", "Z"),
        "power_state": "on",
        "gpus": hardware.gpus(),
        **hardware.driver(),
    }
    response = Agent(nodes[0]).client.post("/api/agent/v1/heartbeat", body, format="json")
    assert response.status_code == 202, response.content
    found = {
        (c.gpu_index, c.signal): c.severity for c in Condition.objects.filter(node=nodes[0], signal__startswith="xid_")
    }
    assert found == {(2, "xid_94"): "defer", (2, "xid_154"): "info", (5, "xid_62"): "reset", (5, "xid_154"): "reset"}


def test_the_node_page_shows_what_the_catalogue_says_and_what_hangar_does(nodes, operator_client):
    _send(nodes[0], 8, [{"xid": 154, "recovery_action": 0}, {"xid": 4242}])
    body = operator_client.get(f"/fleet/nodes/{nodes[0].pk}/").content.decode()
    assert "<code>xid_154</code>" in body and "catalogue XID_154 None" in body
    assert "<code>xid_4242</code>" in body and "hold" in body and "not in the catalogue" in body


def test_an_operator_task_on_a_node_the_policy_then_pulls_becomes_the_pulls_incident(nodes, operator_user):
    from health.services.incidents import IncidentNotClosable

    _send(nodes[0], 8, [{"xid": 4242}])
    run_health_sweep()
    _send(nodes[0], 8, [{"xid": 79}])
    run_health_sweep()
    incident = Incident.objects.get()
    assert incident.severity == "reboot" and refresh(nodes[0]).lifecycle != Lifecycle.AVAILABLE
    with pytest.raises(IncidentNotClosable):  # closing waits for the gate like any pull
        update_postmortem(incident=incident, actor=operator_user.username, cause="", attribution="provider", close=True)


def test_an_application_xid_repeating_on_one_gpu_gets_diagnostics_at_the_next_idle_window(nodes):
    from fleet.models import NodeAgentAction as Action

    membership = allocate(nodes[0])
    _send(nodes[0], 8, [{"xid": 13}])
    _send(nodes[0], 8, [{"xid": 13}])  # the same GPU again: the catalogue's WORKFLOW_XID_13
    run_health_sweep()
    node = refresh(nodes[0])
    assert Condition.objects.get(node=node, signal="app_xid_repeat").severity == "warn"
    assert node.lifecycle == Lifecycle.ACTIVE and not node.cordoned  # the tenant's job is not touched
    assert not Action.objects.filter(node=node, action="dcgm_r3").exists()
    membership.ended_at = timezone.now()
    membership.save()
    Node.objects.filter(pk=node.pk).update(lifecycle=Lifecycle.AVAILABLE)
    run_health_sweep()
    assert Action.objects.filter(node=node, action="dcgm_r3").exists() and refresh(node).cordoned
    Action.objects.filter(node=node, action="dcgm_r3").update(state="succeeded", finished_at=timezone.now())
    assert Agent(node).report(dcgm_r3="pass").status_code == 202
    run_health_sweep()
    assert not refresh(node).cordoned
    assert not Condition.objects.filter(
        node=node, status=ConditionStatus.ACTIVE, signal__in=["xid_13", "app_xid_repeat"]
    ).exists()


def test_a_software_xid_twice_in_a_week_resets_again_but_is_never_fatal(nodes):
    from datetime import timedelta

    from health.models import ConditionEvent

    ConditionEvent.objects.create(
        node=nodes[0],
        gpu_index=1,
        signal="xid_119",
        severity="reset",
        kind="raised",
        at=timezone.now() - timedelta(days=2),
    )
    _send(nodes[0], 8, [{"xid": 119}])
    run_health_sweep()
    assert Incident.objects.get().severity == "reset"  # a GSP timeout: software investigation
    ConditionEvent.objects.create(
        node=nodes[1],
        gpu_index=1,
        signal="xid_62",
        severity="reset",
        kind="raised",
        at=timezone.now() - timedelta(days=2),
    )
    _send(nodes[1], 8, [{"xid": 62}])
    run_health_sweep()
    assert refresh(nodes[1]).lifecycle == Lifecycle.TRIAGE  # a hardware signal twice in 7 days
