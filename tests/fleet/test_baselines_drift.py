"""Golden baselines per node type and drift: API, pages, /metrics, fixed query counts."""

import pytest
from django.contrib.auth.models import Group

from core.models import AuditEvent
from fleet.models import Node, SoftwareBaseline
from fleet.selectors import drift_report
from fleet.services.baselines import create_baseline

from .software_helpers import FULL_STACK, report_stack

pytestmark = pytest.mark.django_db

GOLDEN = {c: FULL_STACK[c][0] for c in ("gpu_driver", "gpu_vbios", "cuda", "nccl")}


@pytest.fixture
def nodes(small_fleet):
    return list(Node.objects.select_related("node_type").order_by("hostname"))


def _golden(node_type, versions=GOLDEN):
    return create_baseline(node_type=node_type, name="2026.11", versions=versions, actor="user:op", golden=True)


def test_drift_appears_when_one_nodes_driver_differs(nodes, ops_api, operator_client):
    for n in nodes:
        report_stack(n, **({"gpu_driver": ("550.127.08", "ok")} if n == nodes[3] else {}))
    created = ops_api.post(
        "/api/v1/ops/baselines",
        {"node_type": nodes[0].node_type.slug, "name": "2026.11", "versions": GOLDEN, "golden": True},
        format="json",
        HTTP_IDEMPOTENCY_KEY="b1",
    )
    assert created.status_code == 201, created.content
    assert created.json()["golden"] and created.json()["golden_set_by"].startswith("user:")
    drift = {(g["component"]): g for g in ops_api.get("/api/v1/ops/software-drift").json()}
    assert drift["gpu_driver"]["nodes_drifting"] == 1
    assert drift["gpu_driver"]["drifting"] == [{"actual": "550.127.08", "count": 1, "hostnames": [nodes[3].hostname]}]
    assert drift["gpu_driver"]["nodes_on_baseline"] == len(nodes) - 1
    assert drift["cuda"]["nodes_drifting"] == 0
    page = operator_client.get(f"/fleet/nodes/{nodes[3].pk}/").content.decode()
    assert 'id="drift-flag"' in page and "550.127.08" in page
    assert 'id="drift-flag"' not in operator_client.get(f"/fleet/nodes/{nodes[0].pk}/").content.decode()
    drift_page = operator_client.get("/fleet/software/drift/").content.decode()
    assert 'id="drift-gpu_driver"' in drift_page and nodes[3].hostname in drift_page
    metrics = ops_api.get("/metrics").content.decode()
    slug = nodes[0].node_type.slug
    assert f'hangar_nodes_off_baseline{{component="gpu_driver",node_type="{slug}"}} 1.0' in metrics
    assert f'hangar_nodes_off_baseline{{component="cuda",node_type="{slug}"}} 0.0' in metrics


def test_a_missing_or_failed_component_is_drift_and_an_unreported_node_is_not(nodes):
    _golden(nodes[0].node_type)
    report_stack(nodes[0], drop=("nccl",))
    report_stack(nodes[1], gpu_driver=("570.133.20", "failed"))
    report = drift_report()
    groups = {g.component: g for g in report.groups}
    assert groups["nccl"].drifting == {"- (missing)": [nodes[0].hostname]}
    assert groups["gpu_driver"].drifting == {"570.133.20 (failed)": [nodes[1].hostname]}
    assert report.unreported == {nodes[0].node_type.slug: len(nodes) - 2}


def test_setting_another_golden_baseline_replaces_the_first_and_is_audited(nodes, ops_api):
    first = _golden(nodes[0].node_type)
    second = create_baseline(
        node_type=nodes[0].node_type, name="2027.01", versions={"gpu_driver": "575.57.08"}, actor="user:op"
    )
    response = ops_api.post(f"/api/v1/ops/baselines/{second.pk}/golden", {"reason": "new branch"}, format="json")
    assert response.status_code == 200 and response.json()["golden"]
    first.refresh_from_db()
    assert not first.golden
    assert AuditEvent.objects.filter(
        action="baseline.set_golden", object_id=str(second.pk), reason="new branch"
    ).exists()


BAD_BASELINES = {
    "no versions": {},
    "bad component": {"GPU Driver!": "570"},
    "oversized version": {"gpu_driver": "5" * 101},
    "too many components": {f"c{i}": "1" for i in range(33)},
    "empty version": {"gpu_driver": " "},
}


@pytest.mark.parametrize("case", sorted(BAD_BASELINES))
def test_bad_baselines_are_400_and_create_nothing(nodes, ops_api, case):
    response = ops_api.post(
        "/api/v1/ops/baselines",
        {"node_type": nodes[0].node_type.slug, "name": "x", "versions": BAD_BASELINES[case]},
        format="json",
        HTTP_IDEMPOTENCY_KEY=f"bad-{case}",
    )
    assert response.status_code == 400, response.content
    assert not SoftwareBaseline.objects.exists()


def test_a_duplicate_name_is_409_and_an_unknown_type_404(nodes, ops_api):
    _golden(nodes[0].node_type)
    body = {"node_type": nodes[0].node_type.slug, "name": "2026.11", "versions": GOLDEN}
    assert ops_api.post("/api/v1/ops/baselines", body, format="json", HTTP_IDEMPOTENCY_KEY="d").status_code == 409
    body["node_type"] = "no-such-type"
    assert ops_api.post("/api/v1/ops/baselines", body, format="json", HTTP_IDEMPOTENCY_KEY="e").status_code == 404


def test_read_only_operators_cannot_set_baselines(nodes, django_user_model):
    from rest_framework.test import APIClient

    from core.services.tokens import create_api_token

    user = django_user_model.objects.create_user("viewer", password="x-pass-123", is_staff=True)
    user.groups.add(Group.objects.get(name="read-only"))
    _, token = create_api_token(kind="operator", user=user, actor="test")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    body = {"node_type": nodes[0].node_type.slug, "name": "x", "versions": GOLDEN}
    assert client.post("/api/v1/ops/baselines", body, format="json", HTTP_IDEMPOTENCY_KEY="r").status_code == 403
    baseline = _golden(nodes[0].node_type)
    other = create_baseline(node_type=nodes[0].node_type, name="y", versions=GOLDEN, actor="user:op")
    assert client.post(f"/api/v1/ops/baselines/{other.pk}/golden", {}, format="json").status_code == 403
    baseline.refresh_from_db()
    assert baseline.golden and client.get("/api/v1/ops/software-drift").status_code == 200


@pytest.mark.parametrize("reporting", [2, 8])
def test_drift_reads_have_a_fixed_query_count(nodes, django_assert_max_num_queries, reporting):
    _golden(nodes[0].node_type)
    for n in nodes[:reporting]:
        report_stack(n)
    with django_assert_max_num_queries(4):
        drift_report()


def test_placement_refuses_off_baseline_nodes_for_a_tenant_that_asks(nodes):
    from tenants.models import Allocation, Tenant
    from tenants.services.placement import InsufficientCapacity, place_allocation

    _golden(nodes[0].node_type)
    for n in nodes:
        report_stack(n, **({"gpu_driver": ("550.127.08", "ok")} if n == nodes[0] else {}))
    strict = Tenant.objects.create(slug="strict", name="Strict", require_baseline=True)
    relaxed = Tenant.objects.create(slug="relaxed", name="Relaxed")
    everything = Allocation.objects.create(
        tenant=strict, name="all", instance_type=nodes[0].node_type, node_count=len(nodes)
    )
    with pytest.raises(InsufficientCapacity, match="golden software baseline"):
        place_allocation(everything)
    assert not Node.objects.filter(lifecycle="provisioning").exists()
    one = Allocation.objects.create(
        tenant=strict, name="one", instance_type=nodes[0].node_type, node_count=len(nodes) - 1
    )
    placed = place_allocation(one)
    assert nodes[0].pk not in {n.pk for n in placed}
    last = Allocation.objects.create(tenant=relaxed, name="last", instance_type=nodes[0].node_type, node_count=1)
    assert [n.pk for n in place_allocation(last)] == [nodes[0].pk]  # a tenant that does not ask gets it


def test_the_admin_creates_baselines_through_the_service_and_makes_one_golden(nodes, operator_client):
    node_type = nodes[0].node_type
    response = operator_client.post(
        "/admin/fleet/softwarebaseline/add/",
        {"node_type": node_type.pk, "name": "admin-made", "versions": '{"gpu_driver": "570.133.20"}'},
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    baseline = SoftwareBaseline.objects.get(name="admin-made")
    assert AuditEvent.objects.filter(action="baseline.create", object_id=str(baseline.pk)).exists()
    operator_client.post(
        "/admin/fleet/softwarebaseline/",
        {"action": "make_golden", "_selected_action": [str(baseline.pk)]},
    )
    baseline.refresh_from_db()
    assert baseline.golden
    assert operator_client.get("/admin/fleet/nodesoftware/").status_code == 200
