"""Deleting a volume (a separate, confirmed, admin-only action, refused while mounted) and the
export-partition rule for attaching one (docs/tenancy.md "Volumes", docs/api.md)."""

import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.choices import TenantRole
from core.models import AuditEvent
from fleet.models import FabricDomain
from tenants.choices import TERMINAL_ALLOCATION_STATES, AllocationState
from tenants.models import Allocation, AllocationNode, Membership, Volume
from tenants.services.allocation_loop import run_allocation_loop
from tenants.services.tenants import create_tenant

from .conftest import tenant_client

pytestmark = pytest.mark.django_db


def post(client, path, body, key=None):
    return client.post(path, body, format="json", HTTP_IDEMPOTENCY_KEY=key or uuid.uuid4().hex)


@pytest.fixture
def acme(small_fleet):
    tenant = create_tenant(slug="acme", name="Acme", max_nodes=8, actor="test", max_volumes=3, max_storage_gb=300)[0]
    return tenant, tenant_client(tenant, role="admin")


@pytest.fixture
def globex(small_fleet):
    tenant = create_tenant(slug="globex", name="Globex", max_nodes=8, actor="test", max_volumes=4)[0]
    return tenant, tenant_client(tenant, role="admin")


def volume(client, name="data", size_gb=100, partition=None):
    body = {"name": name, "size_gb": size_gb, **({"export_partition": partition} if partition else {})}
    r = post(client, "/api/v1/volumes", body)
    assert r.status_code == 201, r.content
    return r.json()["id"]


def allocate(client, *, volume_ids=(), fabric="isolated", n=1):
    body = {"name": "train", "instance_type": "h100-sxm-8x", "node_count": n, "fabric": fabric}
    if volume_ids:
        body["volume_ids"] = list(volume_ids)
    return post(client, "/api/v1/allocations", body)


def partitions(client):
    """The tenant's partitions in the small fleet's NDR pod (where H100s are) and in an empty
    second pod (no nodes: an allocation tied to it cannot be placed)."""
    first = FabricDomain.objects.get(name="dc1-ndr-pod01")
    FabricDomain.objects.get_or_create(
        name="dc1-ndr-pod99",
        defaults={"site": first.site, "technology": first.technology, "generation": first.generation},
    )
    ids = []
    for domain in ("dc1-ndr-pod01", "dc1-ndr-pod99"):
        r = post(client, "/api/v1/fabric-partitions", {"name": f"p-{domain[-2:]}", "fabric_domain": domain})
        assert r.status_code == 201, r.content
        ids.append(r.json()["id"])
    return ids


# ---- deleting a volume -------------------------------------------------------------------


def test_an_admin_deletes_a_detached_volume_and_its_quota_is_freed(acme):
    tenant, admin = acme
    ids = [volume(admin, f"v{i}") for i in range(3)]
    full = post(admin, "/api/v1/volumes", {"name": "more", "size_gb": 1})
    assert full.status_code == 403 and full.json()["code"] == "quota_exceeded"
    gone = admin.delete(f"/api/v1/volumes/{ids[0]}")
    assert gone.status_code == 204
    assert admin.get(f"/api/v1/volumes/{ids[0]}").status_code == 404
    assert admin.delete(f"/api/v1/volumes/{ids[0]}").status_code == 404  # gone is gone, like an SSH key
    audit = AuditEvent.objects.get(action="volume.delete")
    assert audit.before["name"] == "v0" and audit.before["size_gb"] == 100 and "100 GB" in audit.reason
    # the count and the GB it held are free again
    assert post(admin, "/api/v1/volumes", {"name": "again", "size_gb": 100}).status_code == 201
    assert sorted(Volume.objects.filter(tenant=tenant).values_list("name", flat=True)) == ["again", "v1", "v2"]


def test_only_a_tenant_admin_deletes_and_another_tenants_volume_is_404(acme, globex):
    tenant, admin = acme
    mine = volume(admin)
    for role in ("member", "viewer"):
        refused = tenant_client(tenant, role=role).delete(f"/api/v1/volumes/{mine}")
        assert refused.status_code == 403 and refused.headers["Content-Type"] == "application/problem+json"
    _, their_admin = globex
    assert their_admin.delete(f"/api/v1/volumes/{mine}").status_code == 404
    assert their_admin.delete("/api/v1/volumes/not-a-uuid").status_code == 404
    assert Volume.objects.filter(pk=mine).exists() and not AuditEvent.objects.filter(action="volume.delete").exists()


def test_a_mounted_volume_is_refused_naming_the_allocations_until_they_end(acme):
    tenant, admin = acme
    vid = volume(admin)
    pending = allocate(admin, volume_ids=[vid])
    assert pending.status_code == 202, pending.content
    refused = admin.delete(f"/api/v1/volumes/{vid}")
    assert refused.status_code == 409
    body = refused.json()
    assert body["code"] == "volume_attached" and pending.json()["id"] in body["detail"]
    assert body["allocations"] == [{"id": pending.json()["id"], "name": "train", "state": "pending"}]
    run_allocation_loop()  # placed: provisioning, still mounting it
    assert Allocation.objects.get().state == AllocationState.PROVISIONING
    assert admin.delete(f"/api/v1/volumes/{vid}").json()["allocations"][0]["state"] == "provisioning"
    assert Volume.objects.filter(pk=vid).exists() and not AuditEvent.objects.filter(action="volume.delete").exists()
    Allocation.objects.update(state=AllocationState.RELEASED)  # ended: the volume was detached, intact
    AllocationNode.objects.update(ended_at=Allocation.objects.get().created_at)
    assert admin.delete(f"/api/v1/volumes/{vid}").status_code == 204
    assert admin.get(f"/api/v1/allocations/{pending.json()['id']}").json()["volume_ids"] == []
    assert AuditEvent.objects.get(action="volume.delete").before["mounted_by_ended"] == [pending.json()["id"]]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(list(AllocationState)), min_size=0, max_size=3))
def test_delete_succeeds_exactly_when_every_mounting_allocation_has_ended(acme, states):
    """Oracle: the volume may go iff none of the allocations mounting it is pending,
    provisioning, active or releasing (sizes 0 to 3, every mix of states)."""
    tenant, admin = acme
    Allocation.objects.all().delete()
    Volume.objects.all().delete()
    vid = volume(admin)
    for state in states:
        allocation = allocate(admin, volume_ids=[vid])
        assert allocation.status_code == 202
        Allocation.objects.filter(pk=allocation.json()["id"]).update(state=state)
    expect = 204 if all(s in TERMINAL_ALLOCATION_STATES for s in states) else 409
    response = admin.delete(f"/api/v1/volumes/{vid}")
    assert response.status_code == expect
    if expect == 409:
        live = [s for s in states if s not in TERMINAL_ALLOCATION_STATES]
        assert sorted(a["state"] for a in response.json()["allocations"]) == sorted(live)
    assert Volume.objects.filter(pk=vid).exists() == (expect == 409)


def test_the_portal_delete_button_asks_first_and_only_admins_have_it(client, django_user_model, acme, globex):
    tenant, admin = acme
    vid = volume(admin, "datasets", 250)
    theirs = volume(globex[1], "theirs", 10)
    member = django_user_model.objects.create_user("mo", password="pw-123-secret")
    Membership.objects.create(tenant=tenant, user=member, role=TenantRole.MEMBER)
    client.force_login(member)
    assert "data-confirm" not in client.get("/portal/").content.decode()
    assert client.post(f"/portal/volumes/{vid}/delete/").status_code == 403
    boss = django_user_model.objects.create_user("ada", password="pw-123-secret")
    Membership.objects.create(tenant=tenant, user=boss, role=TenantRole.ADMIN)
    client.force_login(boss)
    page = client.get("/portal/").content.decode()
    assert 'data-confirm="Delete volume datasets (250 GB) and all its data?' in page
    assert "onclick" not in page  # the CSP forbids inline script: the confirm is behaviours.js's
    assert client.get(f"/portal/volumes/{vid}/delete/").status_code == 405  # only the confirmed POST
    assert client.post(f"/portal/volumes/{theirs}/delete/").status_code == 404
    assert Volume.objects.filter(pk=theirs).exists()
    mounted = allocate(admin, volume_ids=[vid]).json()["id"]
    refused = client.post(f"/portal/volumes/{vid}/delete/", follow=True).content.decode()
    assert "is mounted by 1 allocation" in refused and mounted in refused
    Allocation.objects.update(state=AllocationState.CANCELLED)
    done = client.post(f"/portal/volumes/{vid}/delete/", follow=True).content.decode()
    assert "Volume datasets deleted" in done and not Volume.objects.filter(pk=vid).exists()


# ---- export partition vs the allocation's partition ------------------------------------


def test_a_volume_goes_only_to_an_allocation_in_its_export_partition(acme):
    tenant, admin = acme
    near, far = partitions(admin)
    v_near, v_far, v_any = volume(admin, "near", partition=near), volume(admin, "far", partition=far), volume(admin)
    # fabric "none" has no partition: nothing exported to one reaches it
    r = allocate(admin, volume_ids=[v_near], fabric="none")
    assert r.status_code == 409 and r.json()["code"] == "volume_partition_mismatch"
    assert "p-01" in r.json()["detail"] and r.json()["volume_id"] == v_near
    # two volumes exported to different partitions cannot both be mounted
    r = allocate(admin, volume_ids=[v_near, v_far])
    assert r.status_code == 409 and r.json()["code"] == "volume_partition_mismatch"
    assert not Allocation.objects.exists()
    # accepted: placed in the volume's partition
    placed = allocate(admin, volume_ids=[v_near, v_any])
    assert placed.status_code == 202
    run_allocation_loop()
    allocation = Allocation.objects.get(pk=placed.json()["id"])
    assert allocation.state == AllocationState.PROVISIONING and str(allocation.fabric_partition_id) == near
    # attaching later: the placed allocation is in `near`, so `far` is refused with the reason
    url = f"/api/v1/allocations/{allocation.pk}/volumes"
    refused = post(admin, url, {"volume_id": v_far})
    assert refused.status_code == 409 and refused.json()["code"] == "volume_partition_mismatch"
    assert "is in fabric partition p-01" in refused.json()["detail"]
    assert refused.json()["allocation_partition"] == near and refused.json()["export_partition"] == far
    assert sorted(admin.get(f"/api/v1/allocations/{allocation.pk}").json()["volume_ids"]) == sorted([v_near, v_any])


def test_an_allocation_goes_only_to_its_volumes_domain(acme):
    _, admin = acme
    _, far = partitions(admin)
    v_far = volume(admin, "far", partition=far)
    # the only H100s are in pod01; the volume's partition is in the empty pod99
    r = allocate(admin, volume_ids=[v_far])
    assert r.status_code == 409 and r.json()["code"] == "insufficient_capacity"
    assert "p-99" in r.json()["detail"] and "dc1-ndr-pod99" in r.json()["detail"]
    assert not Allocation.objects.exists()
    # attached while pending (accepted: one partition), it waits for room there
    pending = allocate(admin).json()["id"]
    assert post(admin, f"/api/v1/allocations/{pending}/volumes", {"volume_id": v_far}).status_code == 202
    result = run_allocation_loop()
    allocation = Allocation.objects.get()
    # the only H100s are in pod01; the volume's partition is in the empty pod99, so it waits
    assert allocation.state == AllocationState.PENDING and not AllocationNode.objects.exists()
    assert result.counts["waiting"] == 1


def test_attaching_later_to_a_fabric_none_or_pending_allocation_checks_the_partition(acme):
    _, admin = acme
    near, far = partitions(admin)
    v_near, v_far = volume(admin, "near", partition=near), volume(admin, "far", partition=far)
    shared = allocate(admin, fabric="none").json()["id"]
    r = post(admin, f"/api/v1/allocations/{shared}/volumes", {"volume_id": v_near})
    assert r.status_code == 409 and 'fabric "none"' in r.json()["detail"]
    pending = allocate(admin, volume_ids=[v_near]).json()["id"]
    r = post(admin, f"/api/v1/allocations/{pending}/volumes", {"volume_id": v_far})
    assert r.status_code == 409 and "would need partition p-01" in r.json()["detail"]
    assert not AuditEvent.objects.filter(action="allocation.volume_attached").exists()


def test_cross_tenant_volumes_and_partitions_are_404_and_nothing_is_attached(acme, globex):
    _, admin = acme
    _, their_admin = globex
    near, _ = partitions(admin)
    mine = volume(admin, "near", partition=near)
    first = FabricDomain.objects.get(name="dc1-ndr-pod01")
    their_part = post(their_admin, "/api/v1/fabric-partitions", {"name": "g", "fabric_domain": first.name}).json()["id"]
    theirs = volume(their_admin, "theirs", partition=their_part)
    # a volume exported to another tenant's partition cannot be made
    stolen = post(admin, "/api/v1/volumes", {"name": "x", "size_gb": 1, "export_partition": their_part})
    assert stolen.status_code == 404
    allocation = allocate(admin).json()["id"]
    run_allocation_loop()
    url = f"/api/v1/allocations/{allocation}/volumes"
    assert post(admin, url, {"volume_id": theirs}).status_code == 404  # their volume, my allocation
    assert post(their_admin, url, {"volume_id": theirs}).status_code == 404  # their token, my allocation
    assert allocate(admin, volume_ids=[theirs]).status_code == 404  # at creation too
    assert post(admin, url, {"volume_id": mine}).status_code == 202  # my partition: fine
    assert admin.get(f"/api/v1/allocations/{allocation}").json()["volume_ids"] == [mine]
    assert not Allocation.objects.filter(volumes__pk=theirs).exists()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    fabric=st.sampled_from(["isolated", "none"]),
    exports=st.lists(st.sampled_from(["near", "far", None]), min_size=1, max_size=3),
)
def test_creation_is_accepted_exactly_when_the_volumes_fit_one_partition(acme, fabric, exports):
    """Oracle from the docs' rule: no volume exported anywhere, or an isolated allocation whose
    volumes are exported to at most one partition (sizes 1 to 3, every mix); and that partition's
    domain must hold it now (only "near" is in the pod with H100s)."""
    tenant, admin = acme
    Allocation.objects.all().delete()
    Volume.objects.all().delete()
    if not tenant.fabric_partitions.exists():
        partitions(admin)
    by_name = {p.name: str(p.pk) for p in tenant.fabric_partitions.all()}
    where = {"near": by_name["p-01"], "far": by_name["p-99"], None: None}
    ids = [volume(admin, f"v{i}", 10, where[e]) for i, e in enumerate(exports)]
    exported = {e for e in exports if e}
    fits = not exported or (fabric == "isolated" and len(exported) == 1)
    code = (
        None if fits and exported != {"far"} else "volume_partition_mismatch" if not fits else "insufficient_capacity"
    )
    r = allocate(admin, volume_ids=ids, fabric=fabric)
    assert r.status_code == (409 if code else 202), r.content
    assert code is None or r.json()["code"] == code
    assert Allocation.objects.exists() == (code is None)
