"""The agent's software inventory report: stored per node and source with when it was seen;
bounded, validated input."""

from datetime import timedelta

import pytest
from django.utils import timezone

from fleet.models import Node, NodeSoftware

from .software_helpers import FULL_STACK, agent_client, report_stack, stamp

pytestmark = pytest.mark.django_db

URL = "/api/agent/v1/software-inventory"


@pytest.fixture
def node(small_fleet):
    return Node.objects.order_by("hostname").first()


def test_report_is_stored_per_component_with_when_it_was_seen(node):
    seen = timezone.now() - timedelta(seconds=30)
    response = report_stack(node, at=seen)
    assert response.json() == {"stored": len(FULL_STACK), "stale": False}
    rows = {r.component: r for r in NodeSoftware.objects.filter(node=node)}
    assert set(rows) == set(FULL_STACK)
    driver = rows["gpu_driver"]
    assert (driver.version, driver.state, driver.source) == ("570.133.20", "ok", "agent")
    assert abs((driver.observed_at - seen).total_seconds()) < 0.01
    assert driver.received_at >= driver.observed_at


def test_a_newer_report_replaces_the_agents_view_and_an_older_one_is_ignored(node):
    now = timezone.now()
    report_stack(node, at=now - timedelta(minutes=5))
    report_stack(node, at=now, drop=("nccl",), gpu_driver=("575.51.03", "ok"))
    assert not NodeSoftware.objects.filter(node=node, component="nccl").exists()
    assert NodeSoftware.objects.get(node=node, component="gpu_driver").version == "575.51.03"
    replay = report_stack(node, at=now - timedelta(minutes=1))  # a spooled report arriving late
    assert replay.json()["stale"] is True
    assert NodeSoftware.objects.get(node=node, component="gpu_driver").version == "575.51.03"


def test_other_sources_rows_are_left_alone(node):
    NodeSoftware.objects.create(
        node=node,
        source="bmc",
        component="bmc_firmware",
        version="1.2.3",
        state="ok",
        observed_at=timezone.now(),
        received_at=timezone.now(),
    )
    report_stack(node)
    assert NodeSoftware.objects.filter(node=node, source="bmc").count() == 1


ATTACKS = {
    "too many components": {"components": [{"component": f"c{i}", "state": "ok"} for i in range(65)]},
    "oversized version": {"components": [{"component": "gpu_driver", "version": "9" * 101, "state": "ok"}]},
    "control characters": {"components": [{"component": "gpu_driver", "version": "570\x1b[2J", "state": "ok"}]},
    "bad component name": {"components": [{"component": "../../etc/passwd", "state": "ok"}]},
    "oversized name": {"components": [{"component": "a" * 41, "state": "ok"}]},
    "unknown state": {"components": [{"component": "gpu_driver", "state": "pwned"}]},
    "repeated component": {
        "components": [{"component": "kernel", "state": "ok"}, {"component": "kernel", "state": "ok"}]
    },
    "not a list": {"components": {"gpu_driver": "570"}},
    "empty": {"components": []},
    "far future": {"components": [{"component": "kernel", "state": "ok"}], "observed_at": "2999-01-01T00:00:00Z"},
    "no timestamp": {"components": [{"component": "kernel", "state": "ok"}], "observed_at": None},
    "oversized detail": {"components": [{"component": "kernel", "state": "ok", "detail": "x" * 301}]},
}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_malformed_or_oversized_reports_are_4xx_with_no_side_effect(node, attack):
    body = {"observed_at": stamp(), **ATTACKS[attack]}
    if body.get("observed_at") is None:
        body.pop("observed_at")
    response = agent_client(node).post(URL, body, format="json")
    assert response.status_code == 400, response.content
    assert response["Content-Type"].startswith("application/problem+json")
    assert not NodeSoftware.objects.exists()


def test_a_huge_body_is_refused_before_parsing(node):
    junk = "x" * (11 * 1024 * 1024)
    response = agent_client(node).post(URL, data=junk, content_type="application/json")
    assert 400 <= response.status_code < 500
    assert not NodeSoftware.objects.exists()


def test_no_agent_token_is_401(node, api):
    response = api.post(URL, {"observed_at": stamp(), "components": []}, format="json")
    assert response.status_code == 401
