"""Portal and operator pages, through the browser-facing views."""

import pytest

from core.choices import TenantRole
from tenants.models import Allocation, Membership
from tenants.services.allocation_loop import run_allocation_loop

pytestmark = pytest.mark.django_db


@pytest.fixture
def member(django_user_model, tenant_a):
    user = django_user_model.objects.create_user("alice", password="pw-alice-123")
    Membership.objects.create(tenant=tenant_a, user=user, role=TenantRole.MEMBER)
    return user


def _create(client, key="f1", n=1):
    return client.post(
        "/portal/allocations/",
        {"name": "web", "instance_type": "h100-sxm-8x", "node_count": n, "fabric": "isolated", "form_key": key},
    )


def test_member_creates_and_cancels_from_the_portal(small_fleet, client, member):
    client.force_login(member)
    assert client.get("/portal/").status_code == 200
    assert _create(client).status_code == 302
    assert _create(client).status_code == 302  # double submit of the same form
    allocation = Allocation.objects.get()
    run_allocation_loop()
    page = client.get("/portal/").content.decode()
    assert "web" in page and "provisioning" in page and "dc1-gpu" in page
    assert client.post(f"/portal/allocations/{allocation.pk}/cancel/").status_code == 302
    assert Allocation.objects.get().cancel_requested_at is not None


def test_portal_refuses_quota_and_other_tenants(small_fleet, client, member, client_b):
    client.force_login(member)
    _create(client, n=500)
    assert not Allocation.objects.exists()
    other = client_b.post(
        "/api/v1/allocations",
        {"name": "b", "instance_type": "h100-sxm-8x", "node_count": 1},
        format="json",
        HTTP_IDEMPOTENCY_KEY="b",
    ).data["id"]
    assert client.post(f"/portal/allocations/{other}/cancel/").status_code == 404
    assert client.post("/portal/allocations/not-a-uuid/cancel/").status_code == 404
    assert Allocation.objects.get().cancel_requested_at is None
    assert "b" not in [a.name for a in Allocation.objects.filter(tenant=member.memberships.get().tenant)]


def test_viewer_and_strangers(small_fleet, client, django_user_model, tenant_a):
    viewer = django_user_model.objects.create_user("vic", password="pw-vic-12345")
    Membership.objects.create(tenant=tenant_a, user=viewer, role=TenantRole.VIEWER)
    client.force_login(viewer)
    assert client.get("/portal/").status_code == 200
    assert _create(client).status_code == 403
    stranger = django_user_model.objects.create_user("sam", password="pw-sam-12345")
    client.force_login(stranger)
    assert client.get("/portal/").status_code == 403  # not a member: the page says so
    assert client.get("/tenants/").status_code == 403  # operators only


@pytest.mark.parametrize("count", [2, 10])
def test_pages_have_fixed_query_counts(small_fleet, member, operator_client, django_assert_max_num_queries, count):
    from django.test import Client

    client = Client()
    client.force_login(member)
    for i in range(count):
        _create(client, key=f"k{i}")
    run_allocation_loop()
    with django_assert_max_num_queries(15):  # 14, and the images the request form offers
        assert client.get("/portal/").status_code == 200
    with django_assert_max_num_queries(6):
        page = operator_client.get("/tenants/")
    assert page.status_code == 200 and "acme" in page.content.decode()


def test_tenant_sign_in_lands_on_the_portal_and_operator_pages_say_where_to_go(client, member, django_user_model):
    client.get("/accounts/login/")
    response = client.post("/accounts/login/", {"username": "alice", "password": "pw-alice-123", "next": "/"})
    assert response.status_code == 302 and response["Location"] == "/portal/"
    refused = client.get("/")
    assert refused.status_code == 403
    page = refused.content.decode()
    assert "for the provider&#x27;s operators" in page and 'href="/portal/"' in page
    portal = client.get("/portal/").content.decode()
    for link in ("/portal/allocations/", "/portal/usage/", "/portal/invoices/", "/portal/tokens/"):
        assert f'href="{link}"' in portal
    assert client.get("/portal/tokens/").status_code == 200
    assert client.get("/portal/allocations/").status_code == 200


def test_operator_sign_in_lands_on_the_overview_and_portal_explains(client, django_user_model):
    django_user_model.objects.create_user("olga", password="pw-olga-123", is_staff=True)
    response = client.post("/accounts/login/", {"username": "olga", "password": "pw-olga-123"})
    assert response["Location"] == "/"
    portal = client.get("/portal/")
    assert portal.status_code == 403 and b"not a member of any tenant" in portal.content
    assert b'href="/tenants/"' in portal.content
    missing = client.get("/fleet/nodes/00000000-0000-0000-0000-000000000000/")
    assert missing.status_code == 404


def test_cancel_asks_first_and_names_the_nodes(small_fleet, client, member):
    client.force_login(member)
    _create(client)
    run_allocation_loop()
    allocation = Allocation.objects.get()
    listing = client.get("/portal/allocations/").content.decode()
    assert f'href="/portal/allocations/{allocation.pk}/cancel/"' in listing
    confirm = client.get(f"/portal/allocations/{allocation.pk}/cancel/").content.decode()
    hostname = allocation.memberships.get().node.hostname
    assert "This stops" in confirm and hostname in confirm and "8 GPUs" in confirm
    assert Allocation.objects.get().cancel_requested_at is None  # the question changed nothing
