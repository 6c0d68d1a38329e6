"""The extended policy: Blackwell XIDs and the NVML recovery action, the NVL72 domain held as
one unit, XID 92 → DCGM level 4 at next idle, thermal over a window, IB link counters and
repair tickets, and the flapping rule on burn-in. Through the agent API and the sweep."""

from datetime import timedelta

import pytest
from django.utils import timezone

from fleet.choices import AgentAction, AgentActionState, Lifecycle
from fleet.models import Node, NodeAgentAction, NodeEvent, NodeType, Rack
from fleet.services.lifecycle import transition
from health.choices import ConditionStatus
from health.models import Condition, Incident, IncidentEvent
from health.policy import RULES
from health.services.sweep import run_health_sweep

from .conftest import Agent, gpu

pytestmark = pytest.mark.django_db


def refresh(node):
    return Node.objects.get(pk=node.pk)


@pytest.fixture
def nvl72(small_fleet):
    """Two GB200 NVL72 racks of 4 trays each (enough to show the domain) in the liquid hall."""
    gb200 = NodeType.objects.get(slug="gb200-nvl72")
    racks = list(Rack.objects.filter(cooling="liquid").order_by("name")[:2])
    trays = []
    for r, rack in enumerate(racks):
        for t in range(4):
            trays.append(
                Node.objects.create(
                    hostname=f"gb-{r}-{t}",
                    serial=f"GB{r}{t}",
                    rack=rack,
                    u_position=1 + t * gb200.u_height,
                    node_type=gb200,
                    lifecycle=Lifecycle.AVAILABLE,
                )
            )
    return trays


def gb_heartbeat(agent, faults=None):
    faults = faults or {}
    body = {
        "observed_at": timezone.now().isoformat().replace("+00:00", "Z"),
        "power_state": "on",
        "gpus": [gpu(i, **faults.get(i, {})) for i in range(4)],
    }
    response = agent.client.post("/api/agent/v1/heartbeat", body, format="json")
    assert response.status_code == 202, response.content
    return response


def test_xid_154_on_a_gb200_tray_holds_its_whole_nvl72_domain(nvl72):
    domain, other = nvl72[:4], nvl72[4:]
    for tray in nvl72:
        gb_heartbeat(Agent(tray))
    gb_heartbeat(Agent(domain[1]), {2: {"xid_errors": [154], "recovery_action": 5}})
    run_health_sweep()
    faulty = refresh(domain[1])
    assert faulty.lifecycle in (Lifecycle.DRAINING, Lifecycle.REMEDIATING)
    signals = set(Condition.objects.filter(node=faulty, status=ConditionStatus.ACTIVE).values_list("signal", flat=True))
    assert {"xid_154", "recovery_recover_imex_domain"} <= signals
    for tray in domain:
        tray = refresh(tray)
        assert tray.cordoned, tray.hostname
        if tray.pk != faulty.pk:
            assert tray.cordon_reason.startswith("NVLink domain held") and tray.lifecycle == Lifecycle.AVAILABLE
    assert not any(refresh(t).cordoned for t in other)  # another rack is another domain
    incident = Incident.objects.get()
    assert set(incident.nodes.values_list("pk", flat=True)) == {t.pk for t in domain}
    assert IncidentEvent.objects.filter(incident=incident, detail__contains="NVLink domain").exists()
    run_health_sweep()  # idempotent: nothing new
    assert NodeEvent.objects.filter(action="health_domain_hold").count() == 3

    # the faulty tray comes back through the gate: the domain is released
    Condition.objects.filter(node=faulty).update(status=ConditionStatus.CLEARED)
    Node.objects.filter(pk=faulty.pk).update(lifecycle=Lifecycle.AVAILABLE, cordoned=False, cordon_reason="")
    run_health_sweep()
    assert not any(refresh(t).cordoned for t in domain)


def test_xid_74_on_an_h100_node_holds_nothing_else(nodes, agent_for):
    for node in nodes[:2]:
        agent_for(node).heartbeat()
    agent_for(nodes[0]).heartbeat(faults={0: {"xid_errors": [74]}})
    run_health_sweep()
    assert refresh(nodes[0]).cordoned and not refresh(nodes[1]).cordoned


@pytest.mark.parametrize(
    ("action", "severity"),
    [(1, "reset"), (2, "reboot"), (3, "defer"), (4, "reset"), (5, "reboot"), (6, "reset"), (7, "reboot")],
)
def test_every_nvml_recovery_action_has_its_severity(nodes, agent_for, action, severity):
    agent_for(nodes[0]).heartbeat(faults={0: {"recovery_action": action}})
    condition = Condition.objects.get(node=nodes[0], signal__startswith="recovery_")
    assert condition.severity == severity and RULES[condition.signal].source.startswith("NVML")


def test_recovery_action_none_and_undecoded_blackwell_nvlink_xids(nodes, agent_for):
    # 144-150 without their unit/errorStatus range from IGNORE to RESET_GPU: a person decides
    # (override nvlink5_undecoded); decoded ones: tests/health/test_xid_catalog.py.
    agent_for(nodes[0]).heartbeat(faults={0: {"recovery_action": 0, "xid_errors": [144, 150]}})
    signals = dict(Condition.objects.filter(node=nodes[0]).values_list("signal", "severity"))
    assert signals == {"xid_144": "hold", "xid_150": "hold"}


def test_xid_92_runs_dcgm_level_4_at_next_idle(nodes, agent_for):
    from tests.fleet.lifecycle_helpers import allocate

    busy, idle = nodes[0], nodes[1]
    membership = allocate(busy)
    for node in (busy, idle):
        agent_for(node).heartbeat(faults={0: {"xid_errors": [92]}})
    run_health_sweep()
    assert refresh(idle).lifecycle == Lifecycle.AVAILABLE  # catalogue: IGNORE; the r4 is Hangar's override
    r4 = NodeAgentAction.objects.filter(action=AgentAction.DCGM_R4)
    assert list(r4.values_list("node_id", flat=True)) == [idle.pk]  # the busy node is not idle
    assert refresh(idle).cordoned and "dcgm_r4" in refresh(idle).cordon_reason
    run_health_sweep()
    assert r4.count() == 1  # queued once
    membership.ended_at = timezone.now()
    membership.save()
    run_health_sweep()
    assert r4.filter(node=busy).exists()
    r4.filter(node=idle).update(state=AgentActionState.SUCCEEDED, finished_at=timezone.now())
    assert agent_for(idle).report(dcgm_r4="pass").status_code == 202
    run_health_sweep()
    idle = refresh(idle)
    assert (
        not idle.cordoned
        and not Condition.objects.filter(node=idle, signal="xid_92", status=ConditionStatus.ACTIVE).exists()
    )
    agent_for(busy).report(dcgm_r4="fail")
    run_health_sweep()
    assert refresh(busy).lifecycle == Lifecycle.TRIAGE  # a failed level 4 is fatal


def test_thermal_from_throttle_reasons_and_the_gpus_own_threshold(nodes, agent_for):
    agent = agent_for(nodes[0])
    agent.heartbeat(
        faults={
            0: {"temperature_c": 70, "throttle_reasons": 0x40},
            1: {"temperature_c": 80, "slowdown_temp_c": 79},
            2: {"temperature_c": 86},
        }
    )
    slow = set(Condition.objects.filter(signal="thermal_slowdown").values_list("gpu_index", flat=True))
    assert slow == {0, 1}  # GPU 2 is below the H100 fallback of 87 °C
    run_health_sweep()
    assert not Condition.objects.filter(signal="thermal_throttle").exists()  # not sustained yet
    Condition.objects.filter(signal="thermal_slowdown", gpu_index=0).update(
        first_seen=timezone.now() - timedelta(minutes=11)
    )  # test setup: GPU 0 has been slow for the window
    agent.heartbeat(faults={0: {"throttle_reasons": 0x20}, 1: {"temperature_c": 80, "slowdown_temp_c": 79}})
    run_health_sweep()
    assert list(
        Condition.objects.filter(signal="thermal_throttle", status=ConditionStatus.ACTIVE).values_list(
            "gpu_index", flat=True
        )
    ) == [0]
    assert refresh(nodes[0]).health == "degraded"


def test_ib_port_down_opens_a_repair_ticket_not_a_power_cycle(nodes, agent_for):
    agent = agent_for(nodes[0])
    body = {
        "observed_at": timezone.now().isoformat().replace("+00:00", "Z"),
        "power_state": "on",
        "gpus": [gpu(i) for i in range(8)],
        "ib_ports": [{"port": "mlx5_0/1", "state": "1: DOWN", "link_downed_1h": 0, "symbol_errors_1h": 0}],
    }
    assert agent.client.post("/api/agent/v1/heartbeat", body, format="json").status_code == 202
    run_health_sweep()
    node = refresh(nodes[0])
    assert node.lifecycle == Lifecycle.TRIAGE
    assert not NodeAgentAction.objects.filter(node=node, action=AgentAction.REBOOT).exists()
    incident = Incident.objects.get()
    assert incident.severity == "repair"
    assert incident.events.filter(detail__contains="cable/transceiver").exists()


def test_link_flaps_and_error_counters_have_thresholds(nodes, agent_for):
    agent = agent_for(nodes[0])
    body = {
        "observed_at": timezone.now().isoformat().replace("+00:00", "Z"),
        "power_state": "on",
        "gpus": [gpu(0, nvlink_errors_1h=150), gpu(1, nvlink_errors_1h=99)] + [gpu(i) for i in range(2, 8)],
        "ib_ports": [
            {"port": "mlx5_0/1", "state": "4: ACTIVE", "link_downed_1h": 2, "symbol_errors_1h": 500},
            {"port": "mlx5_1/1", "state": "4: ACTIVE", "link_downed_1h": 3},
        ],
    }
    assert agent.client.post("/api/agent/v1/heartbeat", body, format="json").status_code == 202
    signals = dict(Condition.objects.filter(node=nodes[0]).values_list("signal", "severity"))
    assert signals == {"nvlink_errors": "warn", "ib_symbol_errors": "warn", "ib_link_flapping": "repair"}
    bad = {**body, "ib_ports": [{"port": "", "state": "x", "link_downed_1h": -1}] * 2}
    r = agent.client.post("/api/agent/v1/heartbeat", bad, format="json")
    assert r.status_code == 400 and "ib_ports.0.port" in {e["field"] for e in r.json()["errors"]}


def test_a_burn_in_that_fails_twice_then_passes_waits_for_an_operator(nodes, agent_for):
    node, agent = nodes[0], agent_for(nodes[0])
    Node.objects.filter(pk=node.pk).update(lifecycle=Lifecycle.ENROLLED)
    for _ in range(2):
        transition(refresh(node), Lifecycle.BURN_IN, actor="user:op", action="start_burn_in")
        agent.report(burn_in="fail")
        run_health_sweep()
        assert refresh(node).lifecycle == Lifecycle.BURN_IN_FAILED
        transition(refresh(node), Lifecycle.TRIAGE, actor="user:op", action="triage")
        transition(refresh(node), Lifecycle.REPAIR, actor="user:op", action="repair")
    transition(refresh(node), Lifecycle.BURN_IN, actor="user:op", action="start_burn_in")
    agent.report(dcgm_r3="pass", nccl_allreduce="pass", burn_in="pass")
    run_health_sweep()
    node = refresh(node)
    assert node.lifecycle == Lifecycle.BURN_IN_FAILED and "operator decision" in node.last_error
    hold = NodeEvent.objects.get(node=node, action="health_flapping")
    assert "2 times" in hold.reason
    # the operator decides (triage → validate) and a pass is then accepted
    transition(node, Lifecycle.TRIAGE, actor="user:op", action="triage", reason="reviewed the burn-in history")
    transition(refresh(node), Lifecycle.VALIDATING, actor="user:op", action="validate")
    agent.report(dcgm_r3="pass", nccl_allreduce="pass", ib_link="pass")
    run_health_sweep()
    assert refresh(node).lifecycle == Lifecycle.AVAILABLE


def test_the_policy_page_shows_every_rule_with_its_source(operator_client, db):
    body = operator_client.get("/health/policy/").content.decode()
    for signal, rule in RULES.items():
        assert f"<code>{signal}</code>" in body
        assert rule.source
    for text in (
        "xid_154",
        "xid_144",
        "recovery_recover_imex_domain",
        "repair ticket",
        "DCGM level 4 at next idle",
        "Analyzing Xid Errors with the Xid Catalog",
        "xid_92_idle_diagnostic",
        "Hangar operating choice",
    ):
        assert text in body
    from health import xid

    for override in xid.OVERRIDES.values():  # each deviation from the catalogue, with its reason
        assert f"<code>{override.name}</code>" in body and override.reason.replace("'", "&#x27;") in body
