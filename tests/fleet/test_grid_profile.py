"""An operator uploads a site's hourly grid carbon intensity as CSV: bounded, validated as a
whole, audited and permission-checked; carbon then uses the hour's figure where the profile covers
the hour and the site's constant elsewhere, and says which."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.contrib.auth.models import Group
from rest_framework.test import APIClient

from core.models import AuditEvent
from core.services.tokens import create_api_token
from fleet.models import GridIntensityHour, Node, Site
from fleet.services.energy import record_counters
from tenants.models import Allocation, AllocationNode
from tenants.services.tenants import create_tenant

pytestmark = pytest.mark.django_db
H0 = datetime(2026, 11, 2, 10, tzinfo=UTC)


def _put(client, site, body: bytes, content_type="text/csv"):
    return client.put(f"/api/v1/ops/sites/{site.pk}/grid-intensity", body, content_type=content_type)


def _csv(*rows: str) -> bytes:
    return ("hour,kg_co2e_per_kwh\n" + "".join(r + "\n" for r in rows)).encode()


@pytest.fixture
def site(small_fleet):
    return Site.objects.get()


def test_an_operator_uploads_a_profile_and_it_is_saved_and_audited(site, ops_api):
    response = _put(ops_api, site, _csv("2026-11-02T10:00:00Z,0.5000", "2026-11-02T12:00:00+01:00,0.25"))
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["hours"], body["replaced"], body["first_hour"]) == (2, 0, "2026-11-02T10:00:00Z")
    assert dict(GridIntensityHour.objects.values_list("hour", "kg_co2e_per_kwh")) == {
        H0: Decimal("0.5000"),
        H0 + timedelta(hours=1): Decimal("0.2500"),  # 12:00+01:00 is 11:00 UTC
    }
    audit = AuditEvent.objects.get(action="site.upload_grid_profile")
    assert audit.object_id == str(site.pk) and audit.after["sha256"] == body["sha256"]
    # uploading again replaces those hours, and only those
    again = _put(ops_api, site, _csv("2026-11-02T10:00:00Z,0.6"))
    assert again.json()["replaced"] == 1
    assert GridIntensityHour.objects.get(hour=H0).kg_co2e_per_kwh == Decimal("0.6")
    assert GridIntensityHour.objects.count() == 2


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"when,value\n2026-11-02T10:00:00Z,0.5\n", "header"),
        (_csv(), "no hours"),
        (_csv("2026-11-02T10:30:00Z,0.5"), "start of an hour"),
        (_csv("2026-11-02T10:00:00,0.5"), "UTC offset"),
        (_csv("yesterday,0.5"), "line 2"),
        (_csv("2026-11-02T10:00:00Z,-0.1"), "between 0 and 3"),
        (_csv("2026-11-02T10:00:00Z,NaN"), "between 0 and 3"),
        (_csv("2026-11-02T10:00:00Z,1e9"), "between 0 and 3"),
        (_csv("2026-11-02T10:00:00Z,0.123456"), "decimal places"),
        (_csv("2026-11-02T10:00:00Z,0.5", "2026-11-02T10:00:00Z,0.4"), "also on line 2"),
        (_csv("2026-11-02T10:00:00Z,0.5,extra"), "two columns"),
        (b"\xff\xfe\x00h\x00o", "UTF-8"),
        (_csv(*(f"{(H0 + timedelta(hours=i)):%Y-%m-%dT%H:00:00Z},0.5" for i in range(17_569))), "at most 17,568"),
        (b"hour,kg_co2e_per_kwh\n" + b"#" * (1024 * 1024 + 10), "larger than"),
    ],
)
def test_a_bad_file_is_a_clear_400_and_nothing_is_saved(site, ops_api, body, says):
    response = _put(ops_api, site, body)
    assert response.status_code == 400, response.content
    assert response["Content-Type"] == "application/problem+json"
    assert says in response.content.decode()
    assert not GridIntensityHour.objects.exists()
    assert not AuditEvent.objects.filter(action="site.upload_grid_profile").exists()


def test_the_wrong_content_type_or_site_is_a_4xx_problem(site, ops_api):
    assert _put(ops_api, site, b'{"hour": 1}', content_type="application/json").status_code == 415
    missing = ops_api.put(f"/api/v1/ops/sites/{Site().pk}/grid-intensity", _csv(), content_type="text/csv")
    assert missing.status_code == 404
    assert (
        ops_api.put("/api/v1/ops/sites/not-a-uuid/grid-intensity", _csv(), content_type="text/csv").status_code == 404
    )


def test_only_an_operator_with_the_permission_may_upload(site, django_user_model):
    viewer = django_user_model.objects.create_user("ro", password="x", is_staff=True)
    viewer.groups.add(Group.objects.get(name="read-only"))
    _, plain = create_api_token(kind="operator", user=viewer, actor="test")
    as_viewer = APIClient()
    as_viewer.credentials(HTTP_AUTHORIZATION=f"Bearer {plain}")
    refused = _put(as_viewer, site, _csv("2026-11-02T10:00:00Z,0.5"))
    assert refused.status_code == 403 and "fleet.add_gridintensityhour" in refused.content.decode()
    tenant, _ = create_tenant(slug="acme", name="Acme", max_nodes=8, actor="test")
    _, tenant_plain = create_api_token(kind="tenant", tenant=tenant, role="admin", actor="test")
    as_tenant = APIClient()
    as_tenant.credentials(HTTP_AUTHORIZATION=f"Bearer {tenant_plain}")
    assert _put(as_tenant, site, _csv("2026-11-02T10:00:00Z,0.5")).status_code in (401, 403)
    assert not GridIntensityHour.objects.exists()


def test_carbon_uses_the_profiled_hour_and_the_constant_elsewhere_and_says_which(site, ops_api):
    tenant, _ = create_tenant(slug="acme", name="Acme", max_nodes=8, actor="test")
    node = Node.objects.order_by("hostname").first()
    allocation = Allocation.objects.create(
        tenant=tenant, name="train", instance_type=node.node_type, node_count=1, state="active"
    )
    AllocationNode.objects.create(allocation=allocation, node=node, started_at=H0 - timedelta(days=1))
    for h in range(3):  # 8 kW for two hours, H0 to H0 + 2 h, as the heartbeat records it
        record_counters(
            node_id=node.pk,
            now=H0 + timedelta(hours=h),
            node_kw=node.node_type.node_kw,
            host_kw=None,
            wall_energy_j=8000 * 3600 * h,
            wall_source="bmc",
            gpu_energy_mj={},
        )
    _, plain = create_api_token(kind="tenant", tenant=tenant, role="member", actor="test")
    portal = APIClient()
    portal.credentials(HTTP_AUTHORIZATION=f"Bearer {plain}")

    def usage():
        (row,) = portal.get("/api/v1/usage", {"start": "2026-11-02T00:00:00Z", "end": "2026-11-03T00:00:00Z"}).json()[
            "energy"
        ]
        return row

    before = usage()
    # 16 kWh IT × PUE 1.58 = 25.28 facility kWh × 0.366 (facility.csv) = 9.252 kg
    assert (before["kg_co2e"], before["carbon_source"], before["carbon_profile_pct"]) == ("9.252", "constant", "0.0")
    assert _put(ops_api, site, _csv("2026-11-02T10:00:00Z,0.5000")).status_code == 200
    after = usage()
    # first hour 12.64 facility kWh × 0.5 = 6.320, second 12.64 × 0.366 = 4.626: 10.946 kg
    assert (after["kg_co2e"], after["carbon_source"], after["carbon_profile_pct"]) == ("10.946", "mixed", "50.0")
    _put(ops_api, site, _csv("2026-11-02T11:00:00Z,0.1"))
    covered = usage()
    # 12.64 × 0.5 + 12.64 × 0.1 = 7.584 kg, every hour from the profile
    assert (covered["kg_co2e"], covered["carbon_source"], covered["carbon_profile_pct"]) == (
        "7.584",
        "profile",
        "100.0",
    )
    assert covered["it_kwh"] == before["it_kwh"] == "16.000"
